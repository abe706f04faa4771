"""The wheels the docker target puts in build contexts; no engine needed."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from chains.targets import wheelhouse
from chains.targets.wheelhouse import TargetPython


def test_the_sdk_wheel_is_reproducible_and_installs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHAINS_CACHE_DIR", str(tmp_path / "cache"))
    first = wheelhouse.sdk_wheel()
    data = first.path.read_bytes()
    first.path.unlink()  # built again from the same files: the same bytes, so the same build cache
    second = wheelhouse.sdk_wheel()
    assert second.path.read_bytes() == data and second.digest == first.digest
    names = zipfile.ZipFile(second.path).namelist()
    assert "chains/__init__.py" in names and "chains_codegen/templates/Dockerfile.jinja" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert f"chains_sdk-{second.version}.dist-info/RECORD" in names

    target = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index"]
    subprocess.run(
        [*pip, "--target", str(target), str(second.path)],
        check=True,
        timeout=120,
    )
    # The installed copy is the one imported (not this checkout) and holds the same code.
    code = "import chains, pathlib; print(pathlib.Path(chains.__file__).parent)"
    found = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(target)!r}); {code}"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    assert Path(found) == target / "chains"
    installed = target / "chains" / "targets" / "wheelhouse.py"
    assert installed.read_bytes() == Path(wheelhouse.__file__).read_bytes()


def test_sdk_requirements_leave_out_extras() -> None:
    requirements = wheelhouse.sdk_requirements()
    assert any(r.startswith("pydantic") for r in requirements)
    assert not any("extra" in r or r.startswith(("pytest", "mypy", "docker")) for r in requirements)


def test_wheel_platforms_of_a_target() -> None:
    bookworm = TargetPython("3.11", "x86_64", "glibc", "2.36")
    tags = bookworm.platforms()
    assert tags[0] == "manylinux_2_36_x86_64" and "manylinux_2_17_x86_64" in tags
    assert "manylinux2014_x86_64" in tags and "manylinux1_x86_64" in tags
    assert "manylinux_2_37_x86_64" not in tags
    alpine = TargetPython("3.12", "aarch64", "musl", "")
    assert all(t.startswith("musllinux_1_") and t.endswith("_aarch64") for t in alpine.platforms())


def test_which_wheels_run_where() -> None:
    host = TargetPython("3.11", "x86_64", "glibc", "2.31")
    assert TargetPython("3.11", "x86_64", "glibc", "2.36").runs_wheels_of(host)
    assert not TargetPython("3.11", "x86_64", "glibc", "2.28").runs_wheels_of(host)  # older C library
    assert not TargetPython("3.12", "x86_64", "glibc", "2.36").runs_wheels_of(host)
    assert not TargetPython("3.11", "aarch64", "glibc", "2.36").runs_wheels_of(host)


def test_probe_output_round_trips() -> None:
    output = subprocess.run(
        [sys.executable, "-c", TargetPython.PROBE], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    assert TargetPython.from_probe(output) == wheelhouse.host_python()


def test_wheelhouse_key_ignores_order_comments_and_blank_lines() -> None:
    target = TargetPython("3.11", "x86_64", "glibc", "2.36")
    key = wheelhouse.wheelhouse_key(["b>=1", "a"], target)
    assert wheelhouse.wheelhouse_key(["a", "", "# note", "b>=1"], target) == key
    assert wheelhouse.wheelhouse_key(["a", "b>=2"], target) != key
    assert wheelhouse.wheelhouse_key(["b>=1", "a"], TargetPython("3.12", "x86_64", "glibc", "2.36")) != key
