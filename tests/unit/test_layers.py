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
        ],
        2,
    ),
    **dict.fromkeys(
        [
            "chains.errors",
            "chains.environ",
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
