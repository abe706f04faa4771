"""A result that cannot be serialized names the endpoint and where in the result it sits."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import chains
from chains.loader import import_chain_file

SOURCE = """
from typing import Any

import pydantic

import chains


class Array:
    \"\"\"Stands for an ndarray: a type no wire codec knows.\"\"\"


class Scores(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(arbitrary_types_allowed=True)
    names: list[str]
    values: Any


class Embedder(chains.ChainletBase):
    async def run_remote(self, nested: bool) -> dict[str, Any]:
        if nested:
            return {"ok": [1, 2], "scores": Scores(names=["a"], values=[0.5, Array()])}
        return {"ok": [1, 2], "embedding": Array()}


@chains.mark_entrypoint
class Entry(chains.ChainletBase):
    def __init__(self, embedder: Embedder = chains.depends(Embedder)) -> None:
        self._embedder = embedder

    async def run_remote(self, nested: bool) -> dict[str, Any]:
        return await self._embedder.run_remote(nested)
"""


@pytest.mark.parametrize(
    ("nested", "where"),
    [(False, "result['embedding'] is a "), (True, "result['scores'].values[1] is a ")],
)
async def test_the_endpoint_and_the_field_are_named(tmp_path: Path, nested: bool, where: str) -> None:
    path = tmp_path / "chain.py"
    path.write_text(textwrap.dedent(SOURCE))
    module, _ = import_chain_file(path)
    with chains.run_local():
        entry = module.Entry()
        with pytest.raises(chains.RemoteError) as info:
            await entry.run_remote(nested)
    message = str(info.value)
    assert "Embedder.run_remote returned a value that cannot be serialized" in message
    assert where in message and "Array" in message
