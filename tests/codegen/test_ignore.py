"""``.chainsignore``: which files of the chain's folder are copied to ``src/``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from codegen.ignore import IgnoreRules, source_files
from tests.codegen.conftest import EXAMPLES, generate_in


@pytest.mark.parametrize(
    ("patterns", "path", "is_dir", "ignored"),
    [
        (["*.log"], "run.log", False, True),
        (["*.log"], "deep/down/run.log", False, True),
        (["*.log"], "run.log.txt", False, False),
        (["data"], "a/data", True, True),  # a name matches at any depth
        (["cache/"], "cache", True, True),
        (["cache/"], "cache", False, False),  # a trailing slash: directories only
        (["/top.txt"], "top.txt", False, True),
        (["/top.txt"], "sub/top.txt", False, False),  # a leading slash anchors
        (["docs/build"], "docs/build", True, True),
        (["docs/build"], "x/docs/build", True, False),  # so does one in the middle
        (["**/fixtures"], "a/b/fixtures", True, True),
        (["**/fixtures"], "fixtures", True, True),
        (["logs/**"], "logs/a/b.txt", False, True),
        (["logs/**"], "logs", True, False),
        (["a/**/z"], "a/z", False, True),
        (["a/**/z"], "a/b/c/z", False, True),
        (["file?.txt"], "file1.txt", False, True),
        (["file?.txt"], "file12.txt", False, False),
        (["data[0-9].csv"], "data7.csv", False, True),
        (["data[!0-9].csv"], "data7.csv", False, False),
        (["*.log", "!keep.log"], "keep.log", False, False),  # negation takes a file back
        (["!keep.log", "*.log"], "keep.log", False, True),  # the last match decides
        (["# *.py", "", "   "], "chain.py", False, False),  # comments and blank lines
        (["\\#notes"], "#notes", False, True),
    ],
)
def test_patterns(patterns: list[str], path: str, is_dir: bool, ignored: bool) -> None:
    assert IgnoreRules.parse(patterns).ignores(path, is_dir=is_dir) is ignored


def _write(root: Path, *paths: str) -> None:
    for rel in paths:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"content of " + rel.encode())


def test_copied_source_honours_chainsignore_and_skips_tool_state(tmp_path: Path) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    shutil.copy(EXAMPLES["hello"], folder / "chain.py")
    _write(
        folder,
        "helpers/text.py",
        "helpers/__pycache__/text.cpython-311.pyc",
        "notes.log",
        "keep.log",
        "data/big.bin",
        "docs/build/index.html",
        "docs/guide.md",
        "tests/test_chain.py",
        ".git/HEAD",
        ".venv/bin/python",
        ".chains/hello/state.json",
        ".mypy_cache/x.json",
    )
    (folder / ".chainsignore").write_text(
        "# what the chainlets do not need\n*.log\n!keep.log\ndata/\n/docs/build\ntests/\n"
    )
    assert [rel for rel, _ in source_files(folder)] == [
        ".chainsignore",
        "chain.py",
        "docs/guide.md",
        "helpers/text.py",
        "keep.log",
    ]
    out = generate_in(folder, folder / "chain.py", "build")  # the output directory lies inside the folder
    src = out.chainlets["Greeter"].directory / "src"
    copied = sorted(p.relative_to(src).as_posix() for p in src.rglob("*") if p.is_file())
    assert copied == [".chainsignore", "chain.py", "docs/guide.md", "helpers/text.py", "keep.log"]
    assert (src / "helpers" / "text.py").read_bytes() == b"content of helpers/text.py"  # bytes exactly
    assert (src / "chain.py").read_bytes() == EXAMPLES["hello"].read_bytes()


def test_ignoring_the_chain_file_itself_is_an_error(tmp_path: Path) -> None:
    from chains.errors import ChainsUsageError

    folder = tmp_path / "project"
    folder.mkdir()
    shutil.copy(EXAMPLES["hello"], folder / "chain.py")
    (folder / ".chainsignore").write_text("*.py\n")
    with pytest.raises(
        ChainsUsageError, match=r"the chain file itself is excluded by project/\.chainsignore"
    ):
        generate_in(tmp_path, folder / "chain.py")
