"""Which chainlets of a chain file list a package in their requirements, read from the source.

Used when the file cannot be imported (a top-level import of a package only some images
install), so the classes cannot be asked: their ``DockerImage(pip_requirements=[...],
requirements_file=...)`` arguments are read from the syntax tree instead.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

__all__ = ["chainlets_requiring", "distribution_name"]

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def distribution_name(requirement: str) -> str | None:
    """The normalized project name of a requirement line (``Numpy>=2`` -> ``numpy``)."""
    match = _NAME.match(requirement)
    if match is None or requirement.lstrip().startswith(("-", "#")):
        return None
    return re.sub(r"[-_.]+", "_", match.group(1)).lower()


def chainlets_requiring(module: str, file: Path) -> dict[str, str]:
    """Class name -> the requirement line, for each class in ``file`` whose requirements name
    a distribution called like ``module`` (``-``, ``_`` and ``.`` alike, any case).

    A distribution whose import name differs from its own (``scikit-learn`` is ``sklearn``)
    is not recognised: the caller then says nothing rather than something wrong.
    """
    try:
        tree = ast.parse(file.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return {}
    wanted = re.sub(r"[-_.]+", "_", module).lower()
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        for requirement in _requirements(node, file.parent):
            if distribution_name(requirement) == wanted:
                found[node.name] = requirement.strip()
                break
    return found


def _requirements(cls: ast.ClassDef, folder: Path) -> list[str]:
    lines: list[str] = []
    for node in ast.walk(cls):
        if not isinstance(node, ast.keyword):
            continue
        if node.arg == "pip_requirements" and isinstance(node.value, ast.List | ast.Tuple):
            lines += [
                e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)
            ]
        elif (
            node.arg == "requirements_file"
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            path = Path(node.value.value)
            try:
                lines += (
                    (path if path.is_absolute() else folder / path).read_text(encoding="utf-8").splitlines()
                )
            except OSError:
                continue
    return lines
