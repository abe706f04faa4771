"""What a push copies: the chain's source, never the state folder, a virtualenv or version
control, so pushing again and again does not grow what each deployment holds."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import Cli
from tests.reliability.conftest import ROOT, record

HELLO = ROOT / "examples" / "hello" / "chain.py"


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def _files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


@pytest.fixture
def project(tmp_path: Path) -> Iterator[tuple[Path, Cli]]:
    """A chain's folder as users keep one: its source, a 1 MB data file it reads, a virtualenv
    named `tools`, a Mercurial checkout, and CHAINS_HOME inside it under a name of its own."""
    folder = tmp_path / "project"
    folder.mkdir()
    shutil.copy(HELLO, folder / "chain.py")
    (folder / "data.bin").write_bytes(os.urandom(1_000_000))
    venv = folder / "tools"
    (venv / "lib" / "site-packages").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (venv / "lib" / "site-packages" / "wheel.bin").write_bytes(os.urandom(2_000_000))
    (folder / ".hg").mkdir()
    (folder / ".hg" / "store.bin").write_bytes(os.urandom(500_000))
    cli = Cli(folder / "state")
    try:
        yield folder, cli
    finally:
        for state_file in cli.home.glob("*/state.json"):
            cli.run("stop", state_file.parent.name, check=False)


def test_three_pushes_in_a_row_copy_the_source_and_nothing_else(project: tuple[Path, Cli]) -> None:
    folder, cli = project
    source = ["chain.py", "data.bin"]
    source_size = sum((folder / rel).stat().st_size for rel in source)
    copies, homes = [], []
    for _ in range(3):
        cli.push(str(folder / "chain.py"))
        deployment = cli.home / "hello" / "deployments" / cli.state("hello")["deployment"]
        for chainlet in ("Hello", "Greeter"):
            src = deployment / "generated" / chainlet / "src"
            assert _files(src) == source, f"{chainlet} got more than its source"
            assert _size(src) == source_size
        copies.append(_size(deployment / "generated"))
        homes.append(_size(cli.home))
    assert copies[0] == copies[1] == copies[2]
    # The state folder keeps the current deployment and the logs: it grows by log lines, not by copies.
    assert homes[2] - homes[0] < source_size
    record(
        "test_three_pushes_in_a_row_copy_the_source_and_nothing_else",
        source_bytes=source_size,
        folder_bytes=_size(folder) - homes[-1],
        generated_bytes_per_push=copies,
        state_folder_bytes_per_push=homes,
    )
