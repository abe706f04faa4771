from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from chains.errors import ChainsUsageError, Violation
from chains.loader import load_chain

HEADER = """\
import asyncio
from typing import Annotated, AsyncGenerator, AsyncIterator, Iterator, Protocol

import pydantic

import chains
"""


class ChainFile:
    """A chain source written to disk, with helpers to find lines and load it."""

    def __init__(self, path: Path, source: str) -> None:
        self.path = path
        self.source = source

    def line(self, needle: str) -> int:
        """The 1-based line holding ``needle`` (exactly one must)."""
        hits = [i for i, text in enumerate(self.source.splitlines(), start=1) if needle in text]
        assert len(hits) == 1, f"{needle!r} found on lines {hits}"
        return hits[0]

    def violations(self, entrypoint: str | None = None) -> list[Violation]:
        with pytest.raises(ChainsUsageError) as info:
            load_chain(self.path, entrypoint)
        assert info.value.violations, f"expected violations, got: {info.value}"
        return list(info.value.violations)

    def only_violation(self, entrypoint: str | None = None) -> Violation:
        found = self.violations(entrypoint)
        assert len(found) == 1, "\n".join(map(str, found))
        return found[0]


@pytest.fixture
def chain_file(tmp_path: Path) -> Callable[..., ChainFile]:
    counter = iter(range(1000))

    def write(body: str, *, header: str = HEADER, name: str | None = None) -> ChainFile:
        source = header + textwrap.dedent(body)
        path = tmp_path / (name or f"chain_{next(counter)}.py")
        path.write_text(source)
        return ChainFile(path, source)

    return write
