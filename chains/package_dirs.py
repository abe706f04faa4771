"""``DockerImage(external_package_dirs=...)``: folders of Python packages that live outside the
chain's own folder (a library shared by several chains, say) and travel with each chainlet.

Each listed folder is an import root, as if it were on ``PYTHONPATH``: a folder ``shared/``
holding ``textutil/__init__.py`` lets the chain ``import textutil``. Paths are relative to the
chain file's folder, or absolute (``chains.make_abs_path_here``). The loader puts them on
``sys.path`` while it imports the chain file, so that ``chains check`` and ``chains push`` see
what the chainlets will; the generator copies them beside each chainlet's server, whose
``sys.path`` they join on every target.

The chain file's top-level imports run before its classes (and their settings) exist, so the
folders it names with literal paths are read from its syntax tree first::

    >>> [d.path for d in declared_package_dirs(Path("chain.py"))]     # doctest: +SKIP
    ['../shared']
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from chains.config import DockerImage
from chains.errors import ChainsUsageError

__all__ = ["DeclaredDir", "declared_package_dirs", "join_import_path", "missing_dir_message", "package_dirs"]


def _resolve(given: str, chain_folder: Path) -> Path:
    path = Path(given)
    return (path if path.is_absolute() else chain_folder / path).resolve()


def missing_dir_message(chainlet: str, given: str, resolved: Path) -> str:
    """What a chainlet whose external package folder is not there is told."""
    return (
        f"chainlet {chainlet}: DockerImage(external_package_dirs=[...]) names {given!r}, which is not a "
        f"folder (looked for {resolved}); the paths are relative to the chain file's folder, or absolute "
        "(chains.make_abs_path_here)"
    )


def package_dirs(chainlet: str, image: DockerImage, chain_folder: Path) -> list[Path]:
    """The resolved folders of ``image.external_package_dirs``, in order, each once; a
    :class:`ChainsUsageError` naming the chainlet and the entry when one is not a folder."""
    found: list[Path] = []
    for given in image.external_package_dirs:
        folder = _resolve(given, chain_folder)
        if not folder.is_dir():
            raise ChainsUsageError(missing_dir_message(chainlet, given, folder))
        if folder not in found:
            found.append(folder)
    return found


def join_import_path(folders: Iterable[Path], after: Path) -> None:
    """Put ``folders`` on ``sys.path`` right after ``after`` (the chain's folder), as a
    generated server orders them: the chain's own modules win over a shared package's."""
    entries = [str(folder) for folder in folders if str(folder) not in sys.path]
    if not entries:
        return
    try:
        at = sys.path.index(str(after)) + 1
    except ValueError:
        at = 0
    sys.path[at:at] = entries


@dataclass(frozen=True)
class DeclaredDir:
    """One literal entry of ``external_package_dirs=[...]`` in a chain file's source."""

    path: str  # as written
    resolved: Path
    line: int
    owner: str | None  # the class it is written in, when it is written in one

    @property
    def missing_message(self) -> str:
        return missing_dir_message(self.owner or f"(line {self.line})", self.path, self.resolved)


def declared_package_dirs(file: Path) -> list[DeclaredDir]:
    """The entries of every ``external_package_dirs=[...]`` in ``file`` that are string
    literals or ``make_abs_path_here("...")`` of one (which, called in the chain file itself,
    is relative to its folder too). Entries computed otherwise are found once the file has
    been imported; a file that cannot be parsed gives none (its import reports why)."""
    try:
        tree = ast.parse(file.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return []
    found: list[DeclaredDir] = []
    _visit(tree, None, file.parent, found)
    return found


def _visit(node: ast.AST, owner: str | None, folder: Path, found: list[DeclaredDir]) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.keyword) and child.arg == "external_package_dirs":
            entries = child.value.elts if isinstance(child.value, ast.List | ast.Tuple) else []
            for entry in entries:
                text = _literal_path(entry)
                if text is not None:
                    found.append(DeclaredDir(text, _resolve(text, folder), entry.lineno, owner))
        _visit(child, child.name if isinstance(child, ast.ClassDef) else owner, folder, found)


def _literal_path(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords:
        func = node.func
        name = (
            func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        )
        if name == "make_abs_path_here":
            return _literal_path(node.args[0])
    return None
