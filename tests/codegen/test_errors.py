"""What cannot be generated is a ChainsUsageError that names the chainlet and the fix."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from chains.errors import ChainsUsageError
from chains.loader import load_chain
from chains_codegen import generate

HEADER = """\
import itertools
from typing import Annotated, AsyncIterator

import pydantic

import chains


class Token(pydantic.BaseModel):
    text: str

"""

ENTRY = """

@chains.mark_entrypoint
class Entry(chains.ChainletBase):
    def __init__(self, dep: Dep = chains.depends(Dep)) -> None:
        self._dep = dep

    async def run_remote(self) -> str:
        return ""
"""


def _generate(tmp_path: Path, dep_source: str, file_name: str = "chain.py") -> None:
    folder = tmp_path / "project"
    folder.mkdir(exist_ok=True)
    path = folder / file_name
    path.write_text(HEADER + textwrap.dedent(dep_source) + ENTRY)
    generate(load_chain(path), path, tmp_path / "out")


def test_stream_types_bound_in_the_class_body(tmp_path: Path) -> None:
    source = """
    class Dep(chains.ChainletBase):
        TYPES = chains.stream_types(Token)

        async def run_remote(self) -> Annotated[AsyncIterator[bytes], TYPES]:
            yield chains.stream_writer(Dep.TYPES).yield_item(Token(text="x"))
    """
    with pytest.raises(ChainsUsageError) as caught:
        _generate(tmp_path, source)
    message = str(caught.value)
    assert "chainlet Dep" in message and "`TYPES`" in message
    assert "not a module-level name" in message and "TOKENS = chains.stream_types(...)" in message


def test_stream_types_built_inside_the_annotation(tmp_path: Path) -> None:
    source = """
    class Dep(chains.ChainletBase):
        async def run_remote(self) -> Annotated[AsyncIterator[bytes], chains.stream_types(Token)]:
            yield b""
    """
    with pytest.raises(ChainsUsageError) as caught:
        _generate(tmp_path, source)
    message = str(caught.value)
    assert (
        "chainlet Dep" in message
        and "builds its StreamTypes in place (`chains.stream_types(Token)`)" in message
    )
    assert "bind it to a module-level name, e.g. TOKENS = chains.stream_types(...)" in message


def test_default_from_the_class_body(tmp_path: Path) -> None:
    source = """
    class Dep(chains.ChainletBase):
        LIMIT = 3

        async def run_remote(self, n: int = LIMIT) -> int:
            return n
    """
    with pytest.raises(ChainsUsageError, match=r"chainlet Dep: the default of parameter `n` .* uses `LIMIT`"):
        _generate(tmp_path, source)


def test_default_that_evaluates_differently_each_time(tmp_path: Path) -> None:
    source = """
    _serial = itertools.count()


    def fresh() -> Token:
        return Token(text=str(next(_serial)))


    class Dep(chains.ChainletBase):
        async def run_remote(self, token: Token = fresh()) -> str:
            return token.text
    """
    with pytest.raises(
        ChainsUsageError, match=r"chainlet Dep: the default of parameter `token` .*cannot be reproduced"
    ):
        _generate(tmp_path, source)


@pytest.mark.parametrize(
    ("file_name", "reason"), [("my-chain.py", "not a valid module name"), ("json.py", "shadow")]
)
def test_chain_file_that_cannot_be_imported_by_name(tmp_path: Path, file_name: str, reason: str) -> None:
    source = """
    class Dep(chains.ChainletBase):
        async def run_remote(self) -> str:
            return ""
    """
    with pytest.raises(ChainsUsageError, match=reason) as caught:
        _generate(tmp_path, source, file_name)
    assert "rename" in str(caught.value)
