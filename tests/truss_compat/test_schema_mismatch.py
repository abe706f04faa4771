"""A stream read with another item model: a ``pydantic.ValidationError`` where it is read, as
Truss Chains' readers raise, and chains' ``StreamSchemaMismatch`` there and at every caller."""

from __future__ import annotations

import pickle
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pydantic
import pytest

import chains
from chains import streaming
from chains.errors import ErrorDetail, RemoteError, StreamSchemaMismatch
from tests.helpers import Cli, unique_port, write_chain


class Words(pydantic.BaseModel):
    words: list[str]


class Clock(pydantic.BaseModel):
    time: float


async def _read_words_as_clocks() -> None:
    writer = streaming.stream_writer(streaming.stream_types(Words))

    async def chunks() -> AsyncIterator[bytes]:
        yield writer.yield_item(Words(words=["a", "b"]))

    reader = streaming.stream_reader(streaming.stream_types(Clock), chunks())
    async for _ in reader.read_items():
        pass


async def test_the_error_is_a_validation_error_and_a_schema_mismatch() -> None:
    with pytest.raises(pydantic.ValidationError) as caught:
        await _read_words_as_clocks()
    error = caught.value
    assert isinstance(error, StreamSchemaMismatch) and isinstance(error, chains.ChainsRuntimeError)
    assert isinstance(error, ValueError)
    # chains' sentence, with both schemas and the fix, is its message and pydantic's error.
    assert str(error).startswith("stream schema mismatch: the producer sends stream_types(Words)")
    assert "build the reader with the same StreamTypes" in str(error)
    (line,) = error.errors()
    assert line["type"] == "stream_schema_mismatch" and line["msg"] == str(error)
    assert line["loc"] == ("preamble",) and line["input"]["schema"] == "stream_types(Words)"
    assert error.title == "stream_types(Clock)"
    again = pickle.loads(pickle.dumps(error))
    assert isinstance(again, StreamSchemaMismatch) and isinstance(again, pydantic.ValidationError)
    assert str(again) == str(error)


async def test_it_crosses_a_hop_as_a_stream_schema_mismatch() -> None:
    with pytest.raises(StreamSchemaMismatch) as caught:
        await _read_words_as_clocks()
    detail = ErrorDetail.from_exception(caught.value, "Reader")
    # Named by its public class: the caller rebuilds it as that, not as a generic error.
    assert (detail.exc_type, detail.exc_module) == ("StreamSchemaMismatch", "chains.errors")
    rebuilt = RemoteError.from_detail(ErrorDetail.model_validate_json(detail.model_dump_json()))
    assert isinstance(rebuilt, StreamSchemaMismatch) and isinstance(rebuilt, ValueError)
    assert not isinstance(rebuilt, chains.GenericRemoteException)
    assert "stream schema mismatch" in str(rebuilt)


SOURCE = """
from collections.abc import AsyncIterator

import pydantic

import chains
from chains import streaming
from chains.errors import StreamSchemaMismatch


class Words(pydantic.BaseModel):
    words: list[str]


class Clock(pydantic.BaseModel):
    time: float


class Reader(chains.ChainletBase):
    async def run_remote(self, text: str) -> str:
        writer = streaming.stream_writer(streaming.stream_types(Words))

        async def chunks() -> AsyncIterator[bytes]:
            yield writer.yield_item(Words(words=text.split()))

        reader = streaming.stream_reader(streaming.stream_types(Clock), chunks())
        try:
            async for _ in reader.read_items():
                pass
        except pydantic.ValidationError:
            raise  # what a Truss Chains reader's caller catches
        return "read"


@chains.mark_entrypoint("mismatch")
class Entry(chains.ChainletBase):
    def __init__(self, reader: Reader = chains.depends(Reader, retries=0)) -> None:
        self._reader = reader

    async def run_remote(self, text: str) -> str:
        try:
            return await self._reader.run_remote(text)
        except StreamSchemaMismatch as exc:
            return f"{type(exc).__name__}: {exc.detail.chainlet}: {exc.remote_message}"
"""


def test_a_served_chainlets_mismatch_reaches_its_caller_as_a_stream_schema_mismatch(tmp_path: Path) -> None:
    file = write_chain(tmp_path / "src", SOURCE)
    cli = Cli(tmp_path / "home")
    try:
        url = str(cli.push(str(file), "--port", str(unique_port()))["entrypoint_url"])
        response = httpx.post(url + "/run_remote", json={"text": "a b"}, timeout=30)
    finally:
        cli.run("stop", "mismatch", check=False)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer.startswith("RemoteStreamSchemaMismatch: Reader: stream schema mismatch: "), answer
    assert "stream_types(Words)" in answer and "stream_types(Clock)" in answer
