"""The import block of a generated module, sorted and grouped as ruff's isort rules want it.

Sections come in the order standard library, third party, first party, one blank line
apart; in each, ``import x`` lines come before ``from x import ...`` lines, modules sort
case-insensitively and names sort constants first, then classes, then the rest. The
generated ``ruff.toml`` names the first-party modules, so ruff and this module agree on
the sections wherever the code is checked.

>>> block = Imports(first_party={"chain"})
>>> block.add_from("typing", "AsyncIterator")
>>> block.add_from("chain", "Token")
>>> block.add_from("chains", "StubBase")
>>> print("\\n".join(block.lines()))
from typing import AsyncIterator
<BLANKLINE>
from chains import StubBase
<BLANKLINE>
from chain import Token
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable

from chains_codegen.pysource import INDENT, LINE_LENGTH

__all__ = ["Imports", "natural_key"]

_STDLIB, _THIRD_PARTY, _FIRST_PARTY = range(3)


def natural_key(text: str) -> tuple[tuple[int, str | int], ...]:
    """Case-insensitive order in which ``x2`` comes before ``x10``, as ruff sorts."""
    return tuple(
        (1, int(part)) if part.isdigit() else (0, part) for part in re.split(r"(\d+)", text.lower()) if part
    )


def _member_key(name: str) -> tuple[int, tuple[tuple[int, str | int], ...], str]:
    # isort's order-by-type: CONSTANTS, then Classes, then everything else.
    if name.isupper() and len(name) > 1:
        group = 0
    elif name[:1].isupper():
        group = 1
    else:
        group = 2
    return group, natural_key(name), name


class Imports:
    """Imports collected while rendering a module; :meth:`lines` prints them."""

    def __init__(self, first_party: Iterable[str] = ()) -> None:
        self.first_party = set(first_party)
        self._modules: set[tuple[str, str | None]] = set()
        self._names: dict[str, set[tuple[str, str | None]]] = {}

    def add_module(self, module: str, alias: str | None = None) -> None:
        """``import module`` or ``import module as alias``."""
        self._modules.add((module, None if alias == module else alias))

    def add_from(self, module: str, name: str, alias: str | None = None) -> None:
        """``from module import name`` or ``from module import name as alias``."""
        self._names.setdefault(module, set()).add((name, None if alias == name else alias))

    def restricted(self, used: set[str]) -> Imports:
        """The imports of this block that bind one of the names in ``used``."""
        kept = Imports(self.first_party)
        kept._modules = {(m, a) for m, a in self._modules if (a or m.partition(".")[0]) in used}
        for module, members in self._names.items():
            names = {(n, a) for n, a in members if (a or n) in used}
            if names:
                kept._names[module] = names
        return kept

    def top_modules(self) -> set[str]:
        """The top-level packages of everything imported."""
        modules = {m for m, _ in self._modules} | set(self._names)
        return {m.partition(".")[0] for m in modules}

    def _section(self, module: str) -> int:
        top = module.partition(".")[0]
        if top in self.first_party:
            return _FIRST_PARTY
        if top in sys.stdlib_module_names:
            return _STDLIB
        return _THIRD_PARTY

    def lines(self) -> list[str]:
        """The import statements, sections separated by an empty line."""
        sections: list[list[str]] = [[], [], []]
        for module, alias in sorted(self._modules, key=lambda m: (natural_key(m[0]), m[0], m[1] or "")):
            sections[self._section(module)].append(f"import {module}" + (f" as {alias}" if alias else ""))
        for module in sorted(self._names, key=lambda m: (natural_key(m), m)):
            members = sorted(self._names[module], key=lambda m: (_member_key(m[0]), m[1] or ""))
            names = [name + (f" as {alias}" if alias else "") for name, alias in members]
            sections[self._section(module)].extend(_from_lines(module, names))
        out: list[str] = []
        for section in sections:
            if section:
                if out:
                    out.append("")
                out.extend(section)
        return out


def _from_lines(module: str, names: list[str]) -> list[str]:
    line = f"from {module} import {', '.join(names)}"
    if len(line) <= LINE_LENGTH:
        return [line]
    # isort wraps a long import one name per line, never onto one indented line.
    return [f"from {module} import (", *(f"{INDENT}{name}," for name in names), ")"]
