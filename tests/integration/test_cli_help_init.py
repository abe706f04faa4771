"""The CLI as a person reads it: whole summaries, examples on every page, and `chains init`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from chains.cli import main
from chains.scaffold import FILES


def test_top_level_help_keeps_every_summary_whole() -> None:
    text = CliRunner().invoke(main, ["--help"], terminal_width=80).output
    commands = text.split("Commands:", 1)[1]
    assert "..." not in commands
    assert "nothing is\n            left running." in text or "nothing is left running." in text


@pytest.mark.parametrize("command", sorted(main.commands))
def test_every_command_help_ends_with_examples(command: str) -> None:
    text = CliRunner().invoke(main, [command, "--help"]).output
    assert "Examples:" in text, text
    assert f"chains {command} " in text.split("Examples:", 1)[1]


def test_push_target_has_help() -> None:
    text = CliRunner().invoke(main, ["push", "--help"]).output
    options = text.split("Options:", 1)[1]
    target = options.split("--target", 1)[1].split("\n  -", 1)[0]
    assert "Where it runs" in target


def test_init_scaffolds_a_chain_whose_test_passes(tmp_path: Path) -> None:
    made = subprocess.run(
        [sys.executable, "-m", "chains", "init", "my-chain"], cwd=tmp_path, capture_output=True, text=True
    )
    assert made.returncode == 0, made.stderr
    folder = tmp_path / "my-chain"
    assert sorted(p.name for p in folder.iterdir()) == sorted(FILES)
    assert "next: cd my-chain && pytest && chains push chain.py" in made.stdout
    checked = subprocess.run(
        [sys.executable, "-m", "chains", "check", "chain.py"], cwd=folder, capture_output=True, text=True
    )
    assert checked.returncode == 0 and "chain 'my-chain'" in checked.stdout, checked.stderr
    # The scaffold's own test, run as its user would, from its folder with its pyproject.toml.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    tested = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=folder,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert tested.returncode == 0 and "1 passed" in tested.stdout, tested.stdout + tested.stderr
    assert "warning" not in (tested.stdout + tested.stderr).lower(), tested.stdout  # a clean first run
    again = subprocess.run(
        [sys.executable, "-m", "chains", "init", "my-chain"], cwd=tmp_path, capture_output=True, text=True
    )
    assert again.returncode == 1 and "already exists" in again.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "chains", "init", "My Chain"], cwd=tmp_path, capture_output=True, text=True
    )
    assert bad.returncode == 1 and "is not a chain name" in bad.stderr
