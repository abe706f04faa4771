"""``chains init NAME``: a chain folder to start from, with a test that passes as written."""

from __future__ import annotations

import re
from pathlib import Path

from chains.errors import ChainsUsageError

__all__ = ["scaffold"]

_NAME = re.compile(r"^[a-z][a-z0-9-]{0,62}$")

_CHAIN = '''\
"""{name}: an entrypoint that streams text, and the dependency it calls."""

from collections.abc import AsyncIterator

import chains


class Shouter(chains.ChainletBase):
    """A dependency: a chainlet of its own, called through a typed stub."""

    async def run_remote(self, word: str) -> str:
        return word.upper()


@chains.mark_entrypoint("{name}")
class Entry(chains.ChainletBase):
    """Streams each word of the text back, shouted, as soon as it is ready."""

    def __init__(self, shouter: Shouter = chains.depends(Shouter, retries=2, timeout_sec=10)) -> None:
        self._shouter = shouter

    async def run_remote(self, text: str) -> AsyncIterator[str]:
        for word in text.split():
            yield await self._shouter.run_remote(word) + " "
'''

_TEST = '''\
"""Tests of the chain in one process: every call crosses the same codecs as when deployed."""

import chains
from chain import Entry


async def test_entry_streams_every_word_shouted() -> None:
    with chains.run_local():
        pieces = [piece async for piece in Entry().run_remote("hello chains")]
    assert pieces == ["HELLO ", "CHAINS "]
'''

_PYPROJECT = """\
# pytest runs the async tests as they are written (pip install pytest pytest-asyncio).
[tool.pytest.ini_options]
asyncio_mode = "auto"
# Each test its own event loop; pytest-asyncio warns until this is chosen.
asyncio_default_fixture_loop_scope = "function"
"""

_IGNORE = """\
# What `chains push` leaves out of the copy each chainlet runs (the syntax of .gitignore).
.venv/
.chains/
__pycache__/
*.pyc
.pytest_cache/
data/
"""

FILES = {
    "chain.py": _CHAIN,
    "test_chain.py": _TEST,
    "pyproject.toml": _PYPROJECT,
    ".chainsignore": _IGNORE,
}


def scaffold(name: str, parent: Path) -> Path:
    """Write the folder ``parent/name`` for chain ``name``; refuses to touch an existing one.

    >>> scaffold("my-chain", Path("."))  # doctest: +SKIP
    PosixPath('my-chain')
    """
    if not _NAME.match(name):
        raise ChainsUsageError(
            f"{name!r} is not a chain name for a new folder: use lowercase letters, digits and '-', "
            "starting with a letter (e.g. my-chain)"
        )
    folder = parent / name
    if folder.exists():
        raise ChainsUsageError(f"{folder} already exists: pick another name, or remove it first")
    folder.mkdir(parents=True)
    for file, text in FILES.items():
        (folder / file).write_text(text.replace("{name}", name), encoding="utf-8")
    return folder
