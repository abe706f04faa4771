"""Which files of the chain's folder are shipped as its source: ``.chainsignore`` rules.

The patterns follow ``.gitignore``: one per line, ``#`` starts a comment, a pattern without a
slash matches a name at any depth (``*.log``, ``data``), one with a slash is anchored at the
folder (``docs/build``, ``/notes.txt``), a trailing slash matches directories only
(``cache/``), ``**`` matches any number of directories (``**/fixtures``, ``logs/**``), and
``!pattern`` takes a file back in. As in git, nothing inside an ignored directory can be
taken back. Some directories are never source and are always skipped.

>>> rules = IgnoreRules.parse(["*.log", "build/", "!keep.log"])
>>> rules.ignores("a/run.log", is_dir=False), rules.ignores("keep.log", is_dir=False)
(True, False)
>>> rules.ignores("build", is_dir=True), rules.ignores("build", is_dir=False)
(True, False)
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ALWAYS_SKIPPED", "IGNORE_FILE", "IgnoreRules", "source_files"]

IGNORE_FILE = ".chainsignore"

# Tool state, caches and virtualenvs: never part of a chain's source, and often large.
ALWAYS_SKIPPED = frozenset(
    {"__pycache__", ".git", ".venv", ".chains", ".mypy_cache", ".pytest_cache", ".ruff_cache"}
)


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


def source_files(folder: Path, *, skip: Iterable[Path] = ()) -> list[tuple[str, Path]]:
    """The files to ship from ``folder``: (relative ``/``-path, path) in sorted order.

    ``skip`` holds directories left out whatever the rules say, such as the output
    directory when it lies inside the folder. Symbolic links to directories are not
    followed (they may point anywhere, even back up the tree); links to files are copied
    as the files they point to.

    >>> [rel for rel, _ in source_files(Path("examples/hello"))]   # doctest: +SKIP
    ['chain.py', 'demo.py', 'test_hello_example.py']
    """
    folder = folder.resolve()
    skipped = {p.resolve() for p in skip}
    rules = IgnoreRules.read(folder)
    found: list[tuple[str, Path]] = []
    for root, dirs, files in os.walk(folder):
        base = Path(root)
        rel_base = base.relative_to(folder).as_posix()
        prefix = "" if rel_base == "." else rel_base + "/"
        kept_dirs = []
        for name in dirs:
            path = base / name
            if name in ALWAYS_SKIPPED or path.resolve() in skipped or path.is_symlink():
                continue
            if not rules.ignores(prefix + name, is_dir=True):
                kept_dirs.append(name)
        dirs[:] = sorted(kept_dirs)
        for name in files:
            path = base / name
            if path.is_file() and not rules.ignores(prefix + name, is_dir=False):
                found.append((prefix + name, path))
    return sorted(found)
