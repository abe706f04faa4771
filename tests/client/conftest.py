"""A consumer's virtual environment, made once per session: pydantic and httpx from the
package index, and the chains package itself without its dependencies."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


class Venv:
    """A virtual environment of the test's own; ``python`` runs in it, ``install`` adds to it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.python = folder / "bin" / "python"

    def install(self, *args: str) -> None:
        command = [str(self.python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *args]
        result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
        assert result.returncode == 0, f"pip install {' '.join(args)} failed:\n{result.stderr}"

    def run(
        self, *args: str, timeout: float = 120, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.python), *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, check=False
        )

    def packages(self) -> set[str]:
        listed = self.run("-m", "pip", "list", "--format=freeze", "--disable-pip-version-check")
        return {line.split("==")[0].lower() for line in listed.stdout.split()}


@pytest.fixture(scope="session")
def consumer_venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Venv]:
    folder = tmp_path_factory.mktemp("consumer") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True, timeout=300)
    venv = Venv(folder)
    venv.install("pydantic>=2.6,<3", "httpx>=0.27,<1")
    venv.install("--no-deps", str(ROOT))
    yield venv
