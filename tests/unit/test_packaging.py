"""What the wheel installs: the project's own top-level packages and nothing else, so that it
collides with no other distribution (``codegen`` is another project's name on the package
index); and an editable install of a checkout still finds the generator in its folder."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
PACKAGES = {"chains", "chains_codegen"}


def _run(*args: str, cwd: Path = ROOT) -> str:
    result = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{' '.join(args)} failed:\n{result.stderr}\n{result.stdout}"
    return result.stdout


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
    assert {path.name for path in target.iterdir() if not path.name.endswith(".dist-info")} == PACKAGES | {
        "bin"
    }
    # The installed copy comes first on the path: the one imported, not this checkout.
    script = (
        f"import sys; sys.path.insert(0, {str(target)!r})\n"
        "import jinja2, chains_codegen.generator as g\n"
        "print(g.__file__)\n"
        "print(g._environment().get_template('server.py.jinja').filename)\n"
    )
    module, template = _run(sys.executable, "-c", script).splitlines()
    assert Path(module).is_relative_to(target) and Path(template).is_relative_to(target)


def test_an_editable_install_finds_the_generator_in_the_checkouts_codegen_folder(tmp_path: Path) -> None:
    editable = _editable_wheel(tmp_path)
    target = tmp_path / "site"
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
        str(editable),
    )
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
