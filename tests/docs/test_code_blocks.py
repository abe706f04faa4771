"""Every code block of README.md and docs/ runs as written, or is marked as a fragment.

A block's info string says what it is: ``python``, ``json``, ``toml`` and ``sh`` blocks are
run (or parsed); a block that cannot run on its own (it needs the rest of a file, an engine,
a cluster, a running chain, minutes) says so with ``fragment`` after its language
(```` ```sh fragment ````). Blocks with no language, or ``text``, are output and layouts:
nothing to run.

An ``sh`` block runs in bash (``-euo pipefail``: every command must succeed) in a folder of its
own that sees the repository's ``examples/``, with this environment's ``chains`` first on
``PATH``: what it writes stays out of the clone.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
DOCS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "codegen" / "README.md",
    ROOT / "benchmarks" / "README.md",
    *sorted((ROOT / "examples").glob("*/README.md")),
]
RUNNABLE = {"python", "json", "toml", "sh"}
# Languages whose blocks are never run, and so must be marked as fragments.
ONLY_FRAGMENTS = {"nginx", "yaml", "dockerfile"}
_FENCE = re.compile(r"^(\s*)```(.*)$")


@dataclass(frozen=True)
class Block:
    file: Path
    line: int
    language: str
    fragment: bool
    code: str

    def __str__(self) -> str:
        return f"{self.file.relative_to(ROOT)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    found = []
    lines = path.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        match = _FENCE.match(lines[index])
        if match is None:
            index += 1
            continue
        indent, info = match.group(1), match.group(2).split()
        start = index
        body = []
        index += 1
        while index < len(lines) and not lines[index].strip().startswith("```"):
            body.append(lines[index][len(indent) :])
            index += 1
        index += 1
        language = info[0] if info else "text"
        found.append(Block(path, start + 1, language, "fragment" in info[1:], "\n".join(body) + "\n"))
    return found


ALL = [block for path in DOCS for block in blocks(path)]


def test_the_docs_have_blocks_to_run() -> None:
    assert sum(1 for b in ALL if b.language in RUNNABLE and not b.fragment) >= 5
    assert any(b.language == "sh" and not b.fragment for b in ALL), "no shell block is run"


@pytest.mark.parametrize("block", [b for b in ALL if not b.fragment], ids=str)
def test_block_runs_as_written(block: Block, tmp_path: Path) -> None:
    if block.language in ONLY_FRAGMENTS:
        fence = f"```{block.language} fragment"
        pytest.fail(f"{block}: a {block.language} block is not run here: mark it {fence}")
    if block.language == "json":
        json.loads(block.code)
    elif block.language == "toml":
        tomllib.loads(block.code)
    elif block.language == "python":
        result = subprocess.run(
            [sys.executable, "-c", block.code], cwd=ROOT, capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 0, f"{block} does not run as written:\n{result.stderr}"
    elif block.language == "sh":
        (tmp_path / "examples").symlink_to(ROOT / "examples")
        env = {
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "CHAINS_HOME": str(tmp_path / ".chains"),
        }
        result = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block.code],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert result.returncode == 0, f"{block} does not run as written:\n{result.stdout}{result.stderr}"
    else:
        assert block.language == "text", f"{block}: unknown language {block.language!r}"
