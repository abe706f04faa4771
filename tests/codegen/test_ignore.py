"""``.chainsignore``: which files of the chain's folder are copied to ``src/``."""

from __future__ import annotations

import contextlib
import re
import shutil
from pathlib import Path

import pytest

from chains_codegen.ignore import IgnoreRules, source_files
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


def _make_venv(folder: Path) -> None:
    """What `python -m venv` leaves that tells a virtual environment: its pyvenv.cfg."""
    _write(folder, "bin/python", "lib/python3.11/site-packages/big/__init__.py")
    (folder / "pyvenv.cfg").write_text("home = /usr/bin\nversion = 3.11.2\n")


def _tag(folder: Path, signature: bytes = b"Signature: 8a477f597d28d172789f06886806bc55") -> None:
    _write(folder, "hello/deployments/1/generated/Greeter/src/chain.py")
    (folder / "CACHEDIR.TAG").write_bytes(signature + b"\n# made by a tool\n")


def test_virtualenvs_under_any_name_vcs_and_tagged_caches_are_never_copied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHAINS_HOME", str(tmp_path / "elsewhere"))
    folder = tmp_path / "project"
    _write(folder, "chain.py", "lib/util.py", ".hg/store/data", ".svn/entries", ".bzr/branch")
    for name in ("venv", "env", "tools", "deep/down/py311"):
        _make_venv(folder / name)
    _write(folder, "conda/conda-meta/history", "conda/lib/libpython.so")
    _tag(folder / "old-state")
    _tag(folder / "fake", signature=b"Signature: not the right one")  # not a tag: copied
    # A file named like the marker does not hide the folder beside it.
    _write(folder, "notes/pyvenv.cfg/readme.txt")
    copied = [rel for rel, _ in source_files(folder)]
    assert copied == [
        "chain.py",
        "fake/CACHEDIR.TAG",
        "fake/hello/deployments/1/generated/Greeter/src/chain.py",
        "lib/util.py",
        "notes/pyvenv.cfg/readme.txt",
    ]


def test_the_state_folder_inside_the_source_is_never_copied_whatever_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "project"
    shutil.copy(EXAMPLES["hello"], (folder.mkdir() or folder) / "chain.py")
    _write(folder, "deploy-state/hello/deployments/20260101-000000-abcdef/generated/Greeter/src/x.py")
    _write(folder, "deploy-state/hello/logs/Greeter.log")
    # Not tagged yet (made by an older chains, or never pushed to): skipped by its path.
    monkeypatch.setenv("CHAINS_HOME", str(folder / "deploy-state"))
    out = generate_in(folder, folder / "chain.py", "build")
    src = out.chainlets["Greeter"].directory / "src"
    assert sorted(p.relative_to(src).as_posix() for p in src.rglob("*") if p.is_file()) == ["chain.py"]
    # Relative, as a user sets it, from the folder the command runs in; and build/, the
    # chainlets generated above, is no source for the next push either.
    monkeypatch.setenv("CHAINS_HOME", "deploy-state")
    with contextlib.chdir(folder):
        assert [rel for rel, _ in source_files(folder)] == ["chain.py"]


def test_a_push_tags_its_state_folder_so_another_home_skips_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chains.targets.state import new_deployment_dir
    from chains_codegen.ignore import never_source

    monkeypatch.setenv("CHAINS_HOME", str(tmp_path / "project" / "state-a"))
    new_deployment_dir("hello")
    _write(tmp_path / "project", "chain.py")
    # Later, from a shell whose CHAINS_HOME is another folder: the first one is still not source.
    monkeypatch.setenv("CHAINS_HOME", str(tmp_path / "state-b"))
    assert never_source(tmp_path / "project" / "state-a")
    assert [rel for rel, _ in source_files(tmp_path / "project")] == ["chain.py"]
    # A state folder holding the source (CHAINS_HOME=.): each chain's folder in it is tagged,
    # the user's own folder is not (backup tools would skip it).
    monkeypatch.setenv("CHAINS_HOME", str(tmp_path / "project"))
    new_deployment_dir("hello")
    assert never_source(tmp_path / "project" / "hello")
    assert not (tmp_path / "project" / "CACHEDIR.TAG").exists()
    assert [rel for rel, _ in source_files(tmp_path / "project")] == ["chain.py"]


def _sparse(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as handle:
        handle.truncate(size)


def test_a_source_over_the_limit_is_refused_naming_its_largest_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chains.errors import ChainsUsageError

    monkeypatch.delenv("CHAINS_MAX_SOURCE_MB", raising=False)
    folder = tmp_path / "project"
    shutil.copy(EXAMPLES["hello"], (folder.mkdir() or folder) / "chain.py")
    _sparse(folder / "data" / "raw" / "dump.bin", 90_000_000)
    _sparse(folder / "data" / "small.csv", 1_000_000)
    _sparse(folder / "models" / "a.bin", 6_000_000)
    _sparse(folder / "models" / "b.bin", 6_000_000)
    with pytest.raises(ChainsUsageError) as refused:
        generate_in(tmp_path, folder / "chain.py")
    message = str(refused.value)
    assert "project/ holds 103.0 MB to copy into every chainlet, over the limit of 100.0 MB" in message
    # data/ is followed down to what weighs in it; models/ holds two files of a size.
    size = f"{EXAMPLES['hello'].stat().st_size / 1000:.1f} kB"
    assert f"The largest paths: data/raw/dump.bin (90.0 MB), models/ (12.0 MB), chain.py ({size})." in message
    assert "project/.chainsignore" in message and "`/data/raw/dump.bin`" in message
    assert "CHAINS_MAX_SOURCE_MB" in message
    assert not (tmp_path / "build").exists()  # refused before anything was written

    # Either way out that the message names works.
    (folder / ".chainsignore").write_text("/data/raw/dump.bin\n")
    src = generate_in(tmp_path, folder / "chain.py").chainlets["Greeter"].directory / "src"
    assert not (src / "data" / "raw").exists() and (src / "models" / "a.bin").stat().st_size == 6_000_000
    (folder / ".chainsignore").unlink()
    monkeypatch.setenv("CHAINS_MAX_SOURCE_MB", "12.5")
    with pytest.raises(ChainsUsageError, match=r"over the limit of 12\.5 MB"):
        generate_in(tmp_path, folder / "chain.py")
    monkeypatch.setenv("CHAINS_MAX_SOURCE_MB", "0")  # no limit
    assert (
        generate_in(tmp_path, folder / "chain.py").chainlets["Greeter"].directory / "src/data/raw"
    ).is_dir()


@pytest.mark.parametrize("value", ["lots", "-1", "nan", "inf", "1e400"])
def test_a_bad_limit_is_refused_naming_the_variable(
    value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chains.errors import ChainsUsageError

    monkeypatch.setenv("CHAINS_MAX_SOURCE_MB", value)
    with pytest.raises(ChainsUsageError, match=rf"CHAINS_MAX_SOURCE_MB='{re.escape(value)}' is not a size"):
        generate_in(tmp_path, EXAMPLES["hello"])


def test_the_command_line_refuses_an_over_limit_source_without_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from chains.cli import main

    folder = tmp_path / "project"
    shutil.copy(EXAMPLES["hello"], (folder.mkdir() or folder) / "chain.py")
    _sparse(folder / "weights.bin", 3_000_000)
    monkeypatch.setenv("CHAINS_MAX_SOURCE_MB", "2")
    monkeypatch.setenv("CHAINS_HOME", str(tmp_path / "home"))
    result = CliRunner().invoke(
        main, ["push", str(folder / "chain.py"), "--dry-run", "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert "The largest paths: weights.bin (3.0 MB), chain.py" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("target", ["compose", "kubernetes", "truss"])
def test_exports_skip_state_virtualenvs_and_vcs(
    target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from chains.cli import main

    folder = tmp_path / "project"
    shutil.copy(EXAMPLES["hello"], (folder.mkdir() or folder) / "chain.py")
    _write(folder, "helpers/util.py", ".git/HEAD", ".hg/store/x", ".svn/entries")
    _make_venv(folder / "env")
    _make_venv(folder / "py")
    _tag(folder / "old-home")
    _write(folder, "home/hello/deployments/1/generated/Greeter/src/chain.py")  # the current home
    monkeypatch.setenv("CHAINS_HOME", str(folder / "home"))
    with contextlib.chdir(folder):
        result = CliRunner().invoke(
            main, ["push", "chain.py", "--target", target, "--dry-run", "--out", "out"]
        )
    assert result.exit_code == 0, result.output
    sources = sorted((folder / "out").rglob("chain.py"))
    assert sources, "the export holds no copy of the source"
    for chain_file in sources:
        copied = sorted(p.relative_to(chain_file.parent).as_posix() for p in chain_file.parent.rglob("*"))
        assert copied == ["chain.py", "helpers", "helpers/util.py"], chain_file


def test_watch_sees_changes_to_the_source_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`chains push --watch` reloads on what a push copies: writes to a state folder inside the
    chain's folder (its logs, each reload's generated code) or a virtualenv do not trigger it."""
    from chains.watch import snapshot

    folder = tmp_path / "project"
    _write(folder, "chain.py", "state/hello/logs/Greeter.log", "notes.log")
    _make_venv(folder / "tools")
    (folder / ".chainsignore").write_text("*.log\n")
    monkeypatch.setenv("CHAINS_HOME", str(folder / "state"))
    before = snapshot(folder)
    assert sorted(Path(p).name for p in before) == [".chainsignore", "chain.py"]
    _write(folder, "state/hello/logs/Greeter.log", "state/hello/deployments/1/generated-1/x.py", "notes.log")
    _write(folder, "tools/lib/python3.11/site-packages/new.py")
    assert snapshot(folder) == before
    _write(folder, "helpers/util.py")
    assert snapshot(folder) != before


def test_editor_swap_backup_and_lock_files_are_never_source(tmp_path: Path) -> None:
    """What an editor keeps beside the file it edits comes and goes as a person types: it is
    never copied, so it changes no chainlet's code and triggers no `--watch` reload."""
    from chains.watch import snapshot

    folder = tmp_path / "project"
    _write(folder, "chain.py", "lib/util.py", "notes~backup.txt", "4913.txt")
    kept = [rel for rel, _ in source_files(folder)]
    before = snapshot(folder)
    _write(
        folder,
        ".chain.py.swp",
        "lib/.util.py.swo",
        "chain.py~",
        "4913",
        "#chain.py#",
        "chain.py___jb_tmp___",
        ".chain.py.kate-swp",
        ".goutputstream-X1Y2Z3",
    )
    assert [rel for rel, _ in source_files(folder)] == kept
    assert kept == ["4913.txt", "chain.py", "lib/util.py", "notes~backup.txt"]
    assert snapshot(folder) == before
