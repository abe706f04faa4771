"""What the wheel installs: the project's own top-level packages and nothing else, so that it
collides with no other distribution (``codegen`` is another project's name on the package
index); and an editable install of a checkout still finds the generator in its folder."""

from __future__ import annotations

import ast
import importlib.metadata
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).parents[2]
PACKAGES = {"chains", "chains_codegen"}


def _run(*args: str, cwd: Path = ROOT) -> str:
    result = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{' '.join(args)} failed:\n{result.stderr}\n{result.stdout}"
    return result.stdout


def _install(wheel: Path, target: Path) -> None:
    """``wheel`` alone (no dependencies, offline) into the folder ``target``."""
    _run(
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--no-deps",
        "--no-index",
        "--target",
        str(target),
        str(wheel),
    )


def _editable_wheel(tmp_path: Path) -> Path:
    """The wheel ``pip install -e .`` installs, from the build backend's hook (PEP 660), offline."""
    pytest.importorskip("hatchling", reason="the build backend is in the dev extra: pip install -e '.[dev]'")
    out = tmp_path / "editable"
    out.mkdir()
    script = f"import hatchling.build as b; print(b.build_editable({str(out)!r}))"
    name = _run(sys.executable, "-c", script).strip().splitlines()[-1]
    return out / name


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("hatchling", reason="the build backend is in the dev extra: pip install -e '.[dev]'")
    out = tmp_path_factory.mktemp("wheel")
    _run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--quiet",
        "--no-deps",
        "--no-build-isolation",
        "-w",
        str(out),
        ".",
    )
    (built,) = out.glob("chains_sdk-*.whl")
    return built


def _top_level(names: list[str]) -> set[str]:
    return {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}


def test_the_wheel_installs_only_the_projects_packages(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert _top_level(names) == PACKAGES
    # The generator ships whole: its templates and its type marker, under its installed name.
    assert "chains_codegen/templates/server.py.jinja" in names and "chains_codegen/py.typed" in names
    assert "chains/py.typed" in names


def test_the_installed_wheel_generates_from_its_own_templates(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    _install(wheel, target)
    assert {path.name for path in target.iterdir() if not path.name.endswith(".dist-info")} == PACKAGES | {
        "bin"
    }
    # The installed copy comes first on the path: the one imported, not this checkout.
    script = (
        f"import sys; sys.path.insert(0, {str(target)!r})\n"
        "import jinja2, chains_codegen.layout as g\n"
        "print(g.__file__)\n"
        "print(g.templates().get_template('server.py.jinja').filename)\n"
    )
    module, template = _run(sys.executable, "-c", script).splitlines()
    assert Path(module).is_relative_to(target) and Path(template).is_relative_to(target)


def test_an_editable_install_finds_the_generator_in_the_checkouts_codegen_folder(tmp_path: Path) -> None:
    editable = _editable_wheel(tmp_path)
    target = tmp_path / "site"
    _install(editable, target)
    # Without this interpreter's own site-packages (-S), only what the editable wheel adds.
    script = (
        f"import site; site.addsitedir({str(target)!r})\n"
        "import importlib.util as u\n"
        "print(u.find_spec('chains_codegen').origin)\n"
        "print(u.find_spec('chains').origin)\n"
    )
    generator, sdk = _run(sys.executable, "-S", "-c", script).splitlines()
    assert Path(generator) == ROOT / "codegen" / "chains_codegen" / "__init__.py"
    assert Path(sdk) == ROOT / "chains" / "__init__.py"


# Third-party imports of chains/ that an extra provides: the target or feature named loads
# them, and refuses with the extra's install line when they are missing.
_FROM_EXTRAS = {
    "docker": "docker",
    "cryptography": "docker",
    "ray": "ray",
    "numpy": "numpy",
    "psycopg": "postgres",
}


def _third_party_imports() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / "chains").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in PACKAGES:
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def _with_their_requirements(names: set[str]) -> set[str]:
    """The distributions ``names`` install, theirs included (pydantic brings pydantic-core)."""
    found, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name in found:
            continue
        found.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for line in requires:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name.lower().replace("_", "-"))
    return found


def test_every_module_chains_imports_is_installed_by_its_requirements_or_a_named_extra() -> None:
    """An image installs the SDK's own requirements only (chains/targets/wheelhouse.py): a
    module the server imports that only the dev extra installs passes every local test and
    fails every container."""
    requirements = importlib.metadata.requires("chains-sdk") or []
    runtime: set[str] = set()
    by_extra: dict[str, set[str]] = {}
    for line in requirements:
        requirement = Requirement(line)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            runtime.add(requirement.name.lower())
        for extra in ("docker", "ray", "numpy", "postgres"):
            if requirement.marker is not None and requirement.marker.evaluate({"extra": extra}):
                by_extra.setdefault(extra, set()).add(requirement.name.lower())
    distributions = importlib.metadata.packages_distributions()
    missing = []
    for module, files in sorted(_third_party_imports().items()):
        provided_by = {name.lower() for name in distributions.get(module, [module])}
        allowed = by_extra.get(_FROM_EXTRAS[module], set()) if module in _FROM_EXTRAS else runtime
        if not {name.replace("_", "-") for name in provided_by} & _with_their_requirements(allowed):
            missing.append(f"{module} (imported by {', '.join(sorted(files)[:3])})")
    assert not missing, f"not installed by the SDK's requirements: {missing}"
