"""The layers of docs/architecture.md, held against the imports of chains/ and chains_codegen.

Every import counts: at the top of a module, inside a function (a lazy import) or under
``TYPE_CHECKING``, since each ties the two modules as much as the others do.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parents[2]

# The picture of docs/architecture.md, top down: a module imports only from its own layer or
# the layers below it. A name stands for the module and everything under it, but "chains"
# for the package's front door alone.
LAYERS: dict[str, int] = {
    **dict.fromkeys(
        [
            "chains",
            "chains.__main__",
            "chains.cli",
            "chains.scaffold",
            "chains.watch",
            "chains.ui",
            # Truss's push, which calls chains.deploy's.
            "chains.truss_compat.push",
        ],
        7,
    ),
    "chains.deploy": 6,
    "chains.targets": 5,
    "chains.progress": 5,
    **dict.fromkeys(
        [
            "chains.server",
            "chains.stubs",
            "chains.client",
            "chains.client_http",
            "chains.client_jobs",
            "chains.client_resumable",
            "chains.local",
            "chains.local_routes",
            "chains.loader",
            "chains_codegen",
            "chains.graph",
            "chains.target_support",
        ],
        4,
    ),
    **dict.fromkeys(
        [
            "chains.chainlet",
            "chains.checks",
            "chains.await_check",
            "chains.model",
            "chains.endpoint",
            "chains.routes",
            "chains.openai",
            "chains.codec",
        ],
        3,
    ),
    **dict.fromkeys(
        [
            "chains.config",
            "chains.package_dirs",
            "chains.context",
            "chains.rpc_options",
            "chains.streaming",
            "chains.websocket",
            "chains.tracing",
            "chains.jobs",
            "chains.batching",
            "chains.batcher",
            "chains.pydantic_numpy",
            # Truss's names, error fields and config spellings; its push is in layer 7.
            "chains.truss_compat",
        ],
        2,
    ),
    **dict.fromkeys(
        [
            "chains.errors",
            "chains.environ",
            "chains.handoff",
            "chains.call_policy",
            "chains.wire",
            "chains.metrics",
            "chains.tls",
            "chains.call_context",
            "chains.limits",
            "chains.locations",
            "chains.origins",
            "chains.source_map",
            "chains.terminal",
            "chains.requirements_scan",
        ],
        1,
    ),
}


def _modules() -> dict[str, Path]:
    found = {}
    # The generator is the package chains_codegen in the folder codegen/.
    for path in [*ROOT.glob("chains/**/*.py"), *ROOT.glob("codegen/chains_codegen/**/*.py")]:
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[0] == "codegen":
            parts.pop(0)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The modules of this tree that ``name`` imports (a package only for a name it defines)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                targets.add(submodule if submodule in MODULES else base)
    return {target for target in targets if target in MODULES and target != name}


IMPORTS = {name: _imports(name, path) for name, path in MODULES.items()}


def _owners(module: str) -> list[str]:
    return [n for n in LAYERS if module == n or (n != "chains" and module.startswith(n + "."))]


def _layer(module: str) -> int:
    return LAYERS[max(_owners(module), key=len)]


def test_every_module_has_a_layer() -> None:
    unplaced = [m for m in MODULES if not _owners(m)]
    assert unplaced == [], f"add these to docs/architecture.md and LAYERS: {unplaced}"


def test_no_module_imports_from_a_higher_layer() -> None:
    upward = [
        f"{module} (layer {_layer(module)}) imports {target} (layer {_layer(target)})"
        for module, targets in sorted(IMPORTS.items())
        for target in sorted(targets)
        if _layer(target) > _layer(module)
    ]
    assert upward == []


def test_no_modules_import_each_other_around_a_loop() -> None:
    graph = IMPORTS
    loops = []
    state: dict[str, str] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                loops.append(" -> ".join([*path[path.index(target) :], target]))
            elif target not in state:
                visit(target, [*path, target])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert loops == []


def test_the_checks_and_the_authoring_api_do_not_import_each_other() -> None:
    # The loop this layering was cut for: the data model now sits below both.
    assert "chains.chainlet" not in IMPORTS["chains.checks"]
    assert "chains.checks" in IMPORTS["chains.chainlet"]
    assert "chains.model" in IMPORTS["chains.checks"]


def test_the_stubs_import_nothing_of_the_server() -> None:
    server = {m for m in MODULES if m.startswith("chains.server")}
    for module in (m for m in MODULES if m.startswith(("chains.stubs", "chains.websocket"))):
        assert not IMPORTS[module] & server, module


def _target_names() -> set[str]:
    """The registered targets' names, read from the registry's source (no import: the rule
    holds the code as written)."""
    tree = ast.parse((ROOT / "chains/targets/__init__.py").read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.For) and isinstance(node.iter, ast.Tuple):
            names.update(
                e.value for e in node.iter.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)
            )
    return names


def _names_a_target(node: ast.expr, targets: set[str]) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in targets
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_names_a_target(e, targets) for e in node.elts)
    if isinstance(node, ast.Call) and node.args:  # frozenset({...})
        return any(_names_a_target(a, targets) for a in node.args)
    return False


def target_comparisons(source: str, targets: set[str]) -> list[str]:
    """Where ``source`` decides by a target's name: a comparison of something named like a
    target (``state.target``, ``target.name``) with a target's name, or a collection of two
    or more targets' names (a table of targets)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            named = [o for o in operands if _names_a_target(o, targets)]
            other = [ast.unparse(o) for o in operands if o not in named]
            if named and any("target" in text or text.endswith(".name") for text in other):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Tuple | ast.List | ast.Set):
            literal = [e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in targets]
            if len(literal) >= 2:
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_the_rule_finds_a_target_named_in_a_comparison() -> None:
    targets = {"local", "docker", "truss"}
    source = (
        'if state.target == "local": pass\n'
        'if target != "docker": pass\n'
        'if target.name in ("local", "docker"): pass\n'
        'IMAGE = frozenset({"docker", "truss"})\n'
        'if (exc.name or "").split(".")[0] in ("truss", "truss_chains"): pass\n'  # a module's name
        'environment = "local"\n'
    )
    assert len(target_comparisons(source, targets)) == 5


def test_nothing_outside_the_targets_names_a_target() -> None:
    # What a target is and can do is asked of its Target (chains/targets/__init__.py), never
    # decided elsewhere by its name.
    targets = _target_names()
    assert {"local", "docker", "swarm", "ray", "truss"} <= targets
    found = [
        f"{name}, {where}"
        for name, path in sorted(MODULES.items())
        if not name.startswith("chains.targets")
        for where in target_comparisons(path.read_text(encoding="utf-8"), targets)
    ]
    assert found == [], "ask the target (chains.targets.target(name)) instead:\n" + "\n".join(found)
    assert len(found) == 0


# Truss Chains' names, which chains.truss_compat maps onto chains' own: its push arguments,
# its error-body fields, its names of chains' classes and its older config field names.
TRUSS_NAMES = frozenset(
    {
        "RPCOptions",
        "chain_name",
        "publish",
        "promote",
        "only_generate_trusses",
        "progress_bar",
        "include_git_info",
        "disable_chain_download",
        "exception_cls_name",
        "exception_module_name",
        "exception_message",
        "user_stack_trace",
        "predict_concurrency",
        "pip_requirements_file",
    }
)

# The core that must speak chains' names alone, and what each may still spell of Truss's.
# config.py keeps the Baseten-only settings a chainlet declares (BasetenImage, the server
# version override), which the Truss export writes, and declares the older keywords for type
# checkers (their mapping is the layer's).
CORE: dict[str, frozenset[str]] = {
    "chains/deploy.py": frozenset(),
    "chains/config.py": frozenset(
        {"BasetenImage", "truss_server_version_override", "predict_concurrency", "pip_requirements_file"}
    ),
    "chains/errors": frozenset(),
}


def _exported(tree: ast.AST) -> set[int]:
    """The strings of ``__all__``: names a module exports, identifiers written as strings."""
    found = set()
    for node in ast.walk(tree):
        names = [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
        if isinstance(node, ast.Assign) and "__all__" in names:
            found.update(id(c) for c in ast.walk(node.value) if isinstance(c, ast.Constant))
    return found


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def truss_names(source: str, allowed: frozenset[str] = frozenset()) -> list[str]:
    """Where ``source`` spells one of Truss's names, or anything named truss or baseten: as an
    identifier (a variable, attribute, function, parameter, keyword or imported name) or in a
    string that is not a docstring. Comments and docstrings may tell where the layer is; the
    import of the layer itself is the seam, not a use of Truss's names. ``allowed`` names
    may be identifiers (a field, a parameter), not strings."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    exported = _exported(tree)
    found = []
    for node in ast.walk(tree):
        spelled: list[str] = []
        if isinstance(node, ast.Name):
            spelled = [node.id]
        elif isinstance(node, ast.Attribute):
            spelled = [node.attr]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            spelled = [node.name]
        elif isinstance(node, ast.arg) or (isinstance(node, ast.keyword) and node.arg is not None):
            spelled = [node.arg or ""]
        elif isinstance(node, ast.ImportFrom) and not (node.module or "").startswith("chains.truss_compat"):
            spelled = [alias.asname or alias.name for alias in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            spelled = [node.value]
        # What a core module may spell it may name, never hold as data (a key it maps).
        exempt = allowed if not isinstance(node, ast.Constant) or id(node) in exported else frozenset()
        for text in spelled:
            named = text in TRUSS_NAMES or any(w in text.lower() for w in ("truss", "baseten"))
            if named and text not in exempt:
                found.append(f"line {getattr(node, 'lineno', '?')}: {text}")
    return found


def test_the_rule_finds_truss_names_in_code_and_not_in_docstrings() -> None:
    source = (
        '"""Truss Chains\' push lives in the layer."""\n'
        "from chains.truss_compat.push import push\n"
        "from chains.rpc_options import RPCOptions\n"
        "def push_it(*baseten_only: object, publish: bool = False) -> None:\n"
        '    """Not Truss\'s."""\n'
        '    fields = {"exception_cls_name": 1}\n'
        '    warn(f"{baseten_only} are Baseten-only")\n'
        "    image = BasetenImage.PY311\n"
    )
    found = sorted(truss_names(source))
    assert found == [
        "line 3: RPCOptions",
        "line 4: baseten_only",
        "line 4: publish",
        "line 6: exception_cls_name",
        "line 7:  are Baseten-only",
        "line 7: baseten_only",
        "line 8: BasetenImage",
    ]
    assert sorted(truss_names(source, frozenset({"BasetenImage"}))) == found[:-1]
    # An allowed name is still found as data: a core module may declare it, not map it.
    assert truss_names('data.pop("publish")\n', frozenset({"publish"})) == ["line 1: publish"]


def test_the_core_speaks_chains_names_and_leaves_truss_names_to_the_layer() -> None:
    found = [
        f"{path.relative_to(ROOT)}, {where}"
        for core, allowed in CORE.items()
        for path in sorted([ROOT / core] if core.endswith(".py") else (ROOT / core).glob("**/*.py"))
        for where in truss_names(path.read_text(encoding="utf-8"), allowed)
    ]
    assert found == [], "map Truss's names in chains/truss_compat/ instead:\n" + "\n".join(found)
