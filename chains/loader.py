"""Loading a chain file: import it as a module of its own, check it, find its entrypoint."""

from __future__ import annotations

import hashlib
import importlib.util
import shlex
import sys
import traceback
from pathlib import Path
from types import ModuleType

from chains.chainlet import ChainletBase, ModelBase, entrypoint_marker
from chains.checks import NAME_RE, build_chain, check_chainlet, collecting_violations
from chains.errors import ChainsUsageError, Violation
from chains.locations import Locator
from chains.model import Chain, is_abstract
from chains.package_dirs import declared_package_dirs, join_import_path, package_dirs

__all__ = ["chainlets_in", "find_entrypoint", "import_chain_file", "load_chain"]


def import_chain_file(path: str | Path) -> tuple[ModuleType, list[Violation]]:
    """Import ``path`` under a module name of its own, collecting definition-time violations.

    Two chain files may both define ``Entry``: each lives in its own module. Importing the
    same file again replaces the earlier module. The file's folder goes on ``sys.path`` so
    that it can import its neighbours, as it would when run as a script, and after it the
    folders its ``DockerImage(external_package_dirs=[...])`` name by literal paths.
    """
    file = Path(path).resolve()
    if not file.is_file():
        raise ChainsUsageError(f"{path}: no such file; give the path of a Python file that defines a chain")
    if file.suffix != ".py":
        raise ChainsUsageError(f"{path}: a chain file is a Python source file ending in .py")
    digest = hashlib.sha1(str(file).encode()).hexdigest()[:10]
    module_name = f"chains_src_{file.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise ChainsUsageError(f"{path}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    folder = str(file.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    declared = declared_package_dirs(file)
    join_import_path([d.resolved for d in declared if d.resolved.is_dir()], file.parent)
    sys.modules[module_name] = module
    with collecting_violations() as found:
        try:
            spec.loader.exec_module(module)
        except ChainsUsageError:
            del sys.modules[module_name]
            raise
        except ModuleNotFoundError as exc:
            del sys.modules[module_name]
            if (exc.name or "").split(".")[0] in ("truss", "truss_chains"):
                raise ChainsUsageError(
                    f"{path}: the file imports {exc.name}, Truss's own package, which is not installed. "
                    "chains needs only its own import (`import chains` for `import truss_chains as "
                    "chains`); Truss's config types (truss.base.truss_config) describe what only Baseten "
                    "acts on: install them with `pip install truss` to check and export "
                    "such a file (see docs/migrating-from-truss.md)"
                ) from exc
            missing = [d.missing_message for d in declared if not d.resolved.is_dir()]
            if missing:
                # The import most likely failed for want of that folder: say so first.
                raise ChainsUsageError("\n".join(missing) + "\n" + _import_failure(path, file, exc)) from exc
            raise ChainsUsageError(_import_failure(path, file, exc)) from exc
        except Exception as exc:
            del sys.modules[module_name]
            raise ChainsUsageError(_import_failure(path, file, exc)) from exc
    return module, found


_OWN_DIR = Path(__file__).resolve().parent


def _import_failure(shown: str | Path, file: Path, exc: BaseException) -> str:
    """What a chain file that fails to import is told: the exception and where it was raised
    in the user's own code first, then the user's frames (the loader's and importlib's left
    out), and for a package only a chainlet's image installs, the rule that says where to
    import it."""
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if "importlib" not in f.filename and not Path(f.filename).resolve().is_relative_to(_OWN_DIR)
    ]
    what = "".join(traceback.format_exception_only(exc)).rstrip()
    if isinstance(exc, SyntaxError):
        # Its own lines already show the file, the line and a caret.
        where = f"{shown}, line {exc.lineno}" if exc.lineno else str(shown)
        return f"{where}: {what.splitlines()[-1]}\n{what}"
    headline = what.splitlines()[-1] if what else type(exc).__name__
    if frames:
        last_frame = frames[-1]
        headline += f" ({Path(last_frame.filename).name}, line {last_frame.lineno})"
    text = f"{shown}: importing the chain file failed: {headline}\n"
    text += "".join(traceback.format_list(frames)) + what
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        text += _only_in_an_image(exc.name, file)
    return text


def _only_in_an_image(module: str, file: Path) -> str:
    """The rule, when ``module`` is in the requirements of chainlets of ``file``."""
    from chains.requirements_scan import chainlets_requiring

    owners = chainlets_requiring(module.partition(".")[0], file)
    if not owners:
        return ""
    names = ", ".join(sorted(owners))
    requirement = next(iter(owners.values()))
    images = "its image has" if len(owners) == 1 else "their images have"
    return (
        f"\n{module} is in the requirements of chainlet {names}: only {images} it, but the chain "
        "file's top level runs here too (`chains check`, `push` and `run_local` import it).\n"
        f"Import {module} inside the chainlet's methods (its __init__ or run_remote), or install "
        f"it here too: pip install {shlex.quote(requirement)}"
    )


def chainlets_in(module: ModuleType) -> list[type[ChainletBase]]:
    """Chainlet classes named in the module, those defined there first, in source order."""
    found = [
        value
        for value in vars(module).values()
        if isinstance(value, type)
        and issubclass(value, ChainletBase)
        and value is not ChainletBase
        and not is_abstract(value)
    ]
    return sorted(found, key=lambda cls: (cls.__module__ != module.__name__, Locator(cls).class_line))


def find_entrypoint(module: ModuleType, entrypoint: str | None = None) -> type[ChainletBase]:
    """The chainlet named ``entrypoint``, or the one marked with ``mark_entrypoint``."""
    classes = chainlets_in(module)
    path = getattr(module, "__file__", module.__name__)
    names = ", ".join(cls.__name__ for cls in classes) or "none"
    if entrypoint is not None:
        for cls in classes:
            if entrypoint in (cls.__name__, cls.remote_config.name):
                return cls
        raise ChainsUsageError(f"{path}: no chainlet named {entrypoint!r}; chainlets in the file: {names}")
    marked = [cls for cls in classes if entrypoint_marker(cls) is not None]
    if not marked:
        # Unmarked, the one model or the one chainlet defined in the file is the entrypoint
        # (as a Truss model file needs no marker).
        own = [cls for cls in classes if cls.__module__ == module.__name__]
        models = [cls for cls in own if issubclass(cls, ModelBase)]
        for alone in (models, own):
            if len(alone) == 1:
                return alone[0]
        if not classes:
            raise ChainsUsageError(
                f"{path}: no class in the file inherits from chains.ChainletBase or chains.ModelBase, "
                "so it holds no chain; subclass one of them (`class Entry(chains.ChainletBase)`)"
            )
        if len(models) > 1:
            raise ChainsUsageError(
                f"{path}: {len(models)} model classes inherit from chains.ModelBase ({names}), so "
                "none is the entrypoint by itself; mark one with @chains.mark_entrypoint or pass "
                "--entrypoint NAME"
            )
        raise ChainsUsageError(
            f"{path}: {len(classes)} chainlets and none marked as entrypoint ({names}); mark one with "
            "@chains.mark_entrypoint or pass --entrypoint NAME"
        )
    if len(marked) > 1:
        raise ChainsUsageError(
            f"{path}: {len(marked)} chainlets are marked as entrypoint: "
            + ", ".join(cls.__name__ for cls in marked)
            + "; keep one @chains.mark_entrypoint, or choose with --entrypoint NAME"
        )
    return marked[0]


def load_chain(path: str | Path, entrypoint: str | None = None, name: str | None = None) -> Chain:
    """Import, check and assemble the chain in ``path``; every violation is reported together.

    >>> chain = load_chain("examples/hello/chain.py")   # doctest: +SKIP
    >>> [c.name for c in chain.chainlets]               # doctest: +SKIP
    ['Greeter', 'Hello']
    """
    module, violations = import_chain_file(path)
    classes = chainlets_in(module)
    for cls in classes:
        if cls.__module__ == module.__name__:
            for violation in check_chainlet(cls)[1]:
                if violation not in violations:
                    violations.append(violation)
    try:
        entry = find_entrypoint(module, entrypoint)
    except ChainsUsageError as exc:
        if violations:
            # Not a violation of its own: it has no line, and fixing those may settle it.
            error = ChainsUsageError(violations=violations)
            error.add_note(str(exc))
            raise error from None
        raise
    given_name = name or entrypoint_marker(entry)
    chain_name = given_name or entry.remote_config.name or entry.__name__
    if given_name and not NAME_RE.match(given_name):
        violations.append(
            Locator(entry).at_class(
                f"chain name {chain_name!r} must start with a letter and hold only letters, "
                "digits, '_' and '-'"
            )
        )
    try:
        chain = build_chain(entry, chain_name)
    except ChainsUsageError as exc:
        violations.extend(v for v in exc.violations if v not in violations)
        raise ChainsUsageError(violations=violations) from None
    folder = Path(path).resolve().parent
    for spec in chain.chainlets:
        # Their modules may be imported later (in a method, by run_local): the path holds them
        # for as long as the chain file's own folder.
        try:
            join_import_path(package_dirs(spec.name, spec.remote_config.docker_image, folder), folder)
        except ChainsUsageError as exc:
            violations.append(Locator(spec.cls).at_class(str(exc)))
    if violations:
        raise ChainsUsageError(violations=violations)
    return chain
