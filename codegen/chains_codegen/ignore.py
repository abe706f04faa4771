"""Which files of the chain's folder are shipped as its source: ``.chainsignore`` rules.

The patterns follow ``.gitignore``: one per line, ``#`` starts a comment, a pattern without a
slash matches a name at any depth (``*.log``, ``data``), one with a slash is anchored at the
folder (``docs/build``, ``/notes.txt``), a trailing slash matches directories only
(``cache/``), ``**`` matches any number of directories (``**/fixtures``, ``logs/**``), and
``!pattern`` takes a file back in. As in git, nothing inside an ignored directory can be
taken back.

Some directories are never source, whatever the rules say: version control (``.git``,
``.hg``, ``.svn``), tool caches, any virtual environment (a folder holding ``pyvenv.cfg``, or
``conda-meta/`` for conda), any folder tagged as a cache (``CACHEDIR.TAG``), the state
folder of ``chains push`` (``$CHAINS_HOME``, tagged so too) under whatever name it has, and
chainlets generated earlier (a folder holding their ``chainlet.json``). Neither are the
files editors keep beside the one being edited (swap files, backups, lock files, the temporary
file of a safe write): they come and go as a person types, and would otherwise change every
chainlet's code. What is left is capped (:func:`check_source_size`): every chainlet gets a copy.

>>> rules = IgnoreRules.parse(["*.log", "build/", "!keep.log"])
>>> rules.ignores("a/run.log", is_dir=False), rules.ignores("keep.log", is_dir=False)
(True, False)
>>> rules.ignores("build", is_dir=True), rules.ignores("build", is_dir=False)
(True, False)
"""

from __future__ import annotations

import math
import os
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from chains.errors import ChainsUsageError
from chains_codegen.descriptor import DESCRIPTOR, read_descriptor

__all__ = [
    "ALWAYS_SKIPPED",
    "CACHEDIR_TAG",
    "CACHEDIR_TAG_SIGNATURE",
    "DEFAULT_MAX_SOURCE_MB",
    "IGNORE_FILE",
    "MAX_SOURCE_ENV",
    "IgnoreRules",
    "check_source_size",
    "editor_temporary",
    "max_source_bytes",
    "never_source",
    "source_files",
]

IGNORE_FILE = ".chainsignore"

# Version control, tool state, caches and virtualenvs by their usual names: never part of a
# chain's source, and often large. Virtualenvs and caches under other names are found by
# what they hold (never_source).
ALWAYS_SKIPPED = frozenset(
    {
        "__pycache__",
        ".git",
        ".hg",
        ".svn",
        ".bzr",
        ".venv",
        ".chains",
        ".tox",
        ".nox",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
    }
)

# The Cache Directory Tagging convention (https://bford.info/cachedir/): a folder holding this
# file, starting with this line, is regenerable tool output. Backup tools skip it, and so does
# the copy; chains tags its own state folder with it.
CACHEDIR_TAG = "CACHEDIR.TAG"
CACHEDIR_TAG_SIGNATURE = b"Signature: 8a477f597d28d172789f06886806bc55"

# What editors write beside a file while it is edited and saved: vim's swap files (.x.swp, .swo,
# ..., its .swx probe) and write probe (4913), backups (x~), emacs's autosave (#x#) and lock
# (.#x), JetBrains' safe write (x___jb_tmp___, x___jb_old___), Kate's swap, gedit's temporary.
_EDITOR_TEMPORARY = re.compile(
    r"\..+\.sw[a-px]|4913|.+~|#.+#|\.#.+|.+___jb_(?:tmp|old)___|\..+\.kate-swp|\.goutputstream-.+"
)

MAX_SOURCE_ENV = "CHAINS_MAX_SOURCE_MB"
DEFAULT_MAX_SOURCE_MB = 100
_MB = 1_000_000


@dataclass(frozen=True)
class _Rule:
    regex: re.Pattern[str]
    negated: bool
    dir_only: bool


@dataclass(frozen=True)
class IgnoreRules:
    """Parsed ``.chainsignore`` patterns; the last pattern that matches a path decides."""

    rules: tuple[_Rule, ...] = ()

    @classmethod
    def parse(cls, lines: Iterable[str]) -> IgnoreRules:
        rules = []
        for raw in lines:
            line = raw.rstrip("\n").rstrip()
            if line.endswith("\\"):  # a trailing escaped space was meant
                line += " "
            if not line or line.startswith("#"):
                continue
            negated = line.startswith("!")
            if negated:
                line = line[1:]
            if line.startswith("\\"):  # "\#name" and "\!name" match a literal first character
                line = line[1:]
            dir_only = line.endswith("/")
            line = line.rstrip("/")
            anchored = "/" in line  # a slash at the start or in the middle anchors it
            line = line.lstrip("/")
            if not line:
                continue
            rules.append(_Rule(re.compile(_translate(line, anchored)), negated, dir_only))
        return cls(tuple(rules))

    @classmethod
    def read(cls, folder: Path) -> IgnoreRules:
        """The rules in ``folder/.chainsignore``, or none when there is no such file."""
        path = folder / IGNORE_FILE
        if not path.is_file():
            return cls()
        return cls.parse(path.read_text(encoding="utf-8").splitlines())

    def ignores(self, path: str, *, is_dir: bool) -> bool:
        """Whether ``path`` (relative, ``/``-separated) is left out of the copy."""
        ignored = False
        for rule in self.rules:
            if rule.dir_only and not is_dir:
                continue
            if rule.regex.fullmatch(path):
                ignored = not rule.negated
        return ignored


def _translate(pattern: str, anchored: bool) -> str:
    """A gitignore pattern as a regular expression over the whole relative path."""
    out = [] if anchored else ["(?:.*/)?"]
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("/**", i) and i + 3 == len(pattern):
            out.append("/.*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif char == "*":
            out.append("[^/]*")
            i += 1
        elif char == "?":
            out.append("[^/]")
            i += 1
        elif char == "[":
            start = i + 1
            start += pattern.startswith("!", start)
            start += pattern.startswith("]", start)  # a leading "]" is a member, not the end
            end = pattern.find("]", start)
            if end == -1:
                out.append(re.escape(char))
                i += 1
                continue
            body = pattern[i + 1 : end]
            negate = body.startswith("!")
            members = re.sub(r"([\\^\[\]])", r"\\\1", body[1:] if negate else body)
            out.append(("[^/" if negate else "[") + members + "]")
            i = end + 1
        elif char == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
        else:
            out.append(re.escape(char))
            i += 1
    return "".join(out)


def never_source(directory: Path) -> bool:
    """Whether ``directory`` is never part of a chain's source, whatever its name: version
    control or a tool's cache, a virtual environment, a tagged cache (the state folder of
    ``chains push`` is one), or a chainlet generated earlier.

    >>> never_source(Path(".git")), never_source(Path("examples"))   # doctest: +SKIP
    (True, False)
    """
    if directory.name in ALWAYS_SKIPPED:
        return True
    if (directory / "pyvenv.cfg").is_file() or (directory / "conda-meta").is_dir():
        return True
    try:  # an earlier export or `chains generate` inside the folder would be copied into each chainlet
        if read_descriptor((directory / DESCRIPTOR).read_text(encoding="utf-8")) is not None:
            return True
    except (OSError, UnicodeDecodeError):
        pass
    try:
        with (directory / CACHEDIR_TAG).open("rb") as tag:
            return tag.read(len(CACHEDIR_TAG_SIGNATURE)) == CACHEDIR_TAG_SIGNATURE
    except OSError:
        return False


def editor_temporary(name: str) -> bool:
    """Whether a file called ``name`` is an editor's swap, backup, lock or temporary file.

    >>> editor_temporary(".chain.py.swp"), editor_temporary("chain.py~"), editor_temporary("chain.py")
    (True, True, False)
    """
    return _EDITOR_TEMPORARY.fullmatch(name) is not None


def _state_folder() -> Path:
    # The rule of chains.targets.state.chains_home, which sits above the generator: the
    # current state folder is skipped by its path too, before any push has tagged it.
    return Path(os.environ.get("CHAINS_HOME") or ".chains").absolute()


def source_files(folder: Path, *, skip: Iterable[Path] = ()) -> list[tuple[str, Path]]:
    """The files to ship from ``folder``: (relative ``/``-path, path) in sorted order.

    ``skip`` holds directories left out whatever the rules say, such as the output
    directory when it lies inside the folder; so are ``$CHAINS_HOME`` and every directory
    :func:`never_source` names. Symbolic links to directories are not followed (they may
    point anywhere, even back up the tree); links to files are copied as the files they
    point to.

    >>> [rel for rel, _ in source_files(Path("examples/hello"))]   # doctest: +SKIP
    ['chain.py', 'demo.py', 'test_hello_example.py']
    """
    folder = folder.resolve()
    skipped = {p.resolve() for p in (*skip, _state_folder())}
    rules = IgnoreRules.read(folder)
    found: list[tuple[str, Path]] = []
    for root, dirs, files in os.walk(folder):
        base = Path(root)
        rel_base = base.relative_to(folder).as_posix()
        prefix = "" if rel_base == "." else rel_base + "/"
        kept_dirs = []
        for name in dirs:
            path = base / name
            if path.is_symlink() or path.resolve() in skipped or never_source(path):
                continue
            if not rules.ignores(prefix + name, is_dir=True):
                kept_dirs.append(name)
        dirs[:] = sorted(kept_dirs)
        for name in files:
            path = base / name
            if editor_temporary(name) or not path.is_file():
                continue
            if not rules.ignores(prefix + name, is_dir=False):
                found.append((prefix + name, path))
    return sorted(found)


def max_source_bytes() -> int | None:
    """The most a chain's source may weigh (``$CHAINS_MAX_SOURCE_MB``, default 100 MB); None
    when the variable is 0 (no limit)."""
    raw = os.environ.get(MAX_SOURCE_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_SOURCE_MB * _MB
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise ChainsUsageError(
            f"{MAX_SOURCE_ENV}={raw!r} is not a size in megabytes; set it to a number such as "
            f"{DEFAULT_MAX_SOURCE_MB * 5}, or 0 for no limit"
        )
    return None if value == 0 else int(value * _MB)


def check_source_size(folder: Path, files: Iterable[tuple[str, Path]], limit: int | None) -> int:
    """The total size of ``files`` (as :func:`source_files` gives them); a clear error naming
    the largest paths when it is over ``limit`` bytes, since each chainlet gets a copy."""
    sizes = {rel: path.stat().st_size for rel, path in files}
    total = sum(sizes.values())
    if limit is None or total <= limit:
        return total
    largest = ", ".join(f"{rel} ({_megabytes(size)})" for rel, size in _largest_paths(sizes))
    raise ChainsUsageError(
        f"the chain's folder {folder.name}/ holds {_megabytes(total)} to copy into every chainlet, "
        f"over the limit of {_megabytes(limit)}. The largest paths: {largest}. List what the "
        f"chainlets do not need in {folder.name}/{IGNORE_FILE} (one pattern a line, as in "
        f".gitignore, e.g. a line `/{_largest_paths(sizes)[0][0]}`), or raise the limit with "
        f"{MAX_SOURCE_ENV}=<megabytes> (0: none)"
    )


def _megabytes(size: int) -> str:
    return f"{size / _MB:.1f} MB" if size >= _MB // 10 else f"{size / 1000:.1f} kB"


def _largest_paths(sizes: dict[str, int], count: int = 5) -> list[tuple[str, int]]:
    """The heaviest entries at the top of the folder, each followed down while one entry
    inside it holds most of it (``data/`` holding a 2 GB ``data/raw/`` names ``data/raw/``)."""
    totals: dict[str, int] = defaultdict(int)
    children: dict[str, set[str]] = defaultdict(set)
    for rel, size in sizes.items():
        parts = rel.split("/")
        parent = ""
        for depth in range(1, len(parts) + 1):
            key = "/".join(parts[:depth]) + ("/" if depth < len(parts) else "")
            totals[key] += size
            children[parent].add(key)
            parent = key
    picked = []
    for key in children[""]:
        while children[key]:
            biggest = max(children[key], key=lambda k: (totals[k], k))
            if 2 * totals[biggest] <= totals[key]:
                break
            key = biggest
        picked.append((key, totals[key]))
    return sorted(picked, key=lambda item: (-item[1], item[0]))[:count]
