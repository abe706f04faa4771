"""Generated code is formatted, lint-clean and passes ``mypy --strict``, as if written by hand."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from chains_codegen import GeneratedChain
from tests.codegen.conftest import EXAMPLES


def _run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_generated_code_is_ruff_formatted_and_clean(
    generated: dict[str, GeneratedChain], tmp_path: Path
) -> None:
    # Each chainlet directory carries its ruff.toml, and its src/ (the user's code) is excluded.
    trees = [str(chain.out_dir) for chain in generated.values()]
    formatted = _run("ruff", "format", "--no-cache", "--check", "--diff", *trees, cwd=tmp_path)
    assert formatted.returncode == 0, formatted.stdout + formatted.stderr
    checked = _run("ruff", "check", "--no-cache", *trees, cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_generated_code_passes_mypy_strict(
    example: str, generated: dict[str, GeneratedChain], tmp_path_factory: pytest.TempPathFactory
) -> None:
    cache = tmp_path_factory.getbasetemp() / "mypy-cache"  # shared: chains and pydantic are checked once
    for chainlet in generated[example].chainlets.values():
        directory = chainlet.directory
        env = {**os.environ, "MYPYPATH": os.pathsep.join([str(directory), str(directory / "src")])}
        # The user's own modules are followed for their types but not judged: silent.
        done = _run(
            "mypy",
            "--strict",
            "--follow-imports=silent",
            "--no-error-summary",
            "--cache-dir",
            str(cache),
            "server.py",
            "chains_stubs",
            cwd=directory,
            env=env,
        )
        assert done.returncode == 0, f"{chainlet.name}:\n{done.stdout}{done.stderr}"
