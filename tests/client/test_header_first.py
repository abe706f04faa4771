"""A structured stream's unread header is refused by the blocking reader as by the async one:
the same error, and the stream still readable once the header is taken (issue 28)."""

from __future__ import annotations

import pytest

from chains.client import AsyncClient, Client
from chains.errors import ChainsUsageError
from tests.client.conftest import KEY
from tests.client.consume import TOKENS, Started, Usage  # a consumer's own copy of the types

REFUSAL = (
    r"Called `read_items`, but there the stream contains header data"
    r".*call `reader.read_header\(\)` first"
)


def _sync_refusal(url: str) -> str:
    with Client(url, api_key=KEY) as client, client.stream(TOKENS, prompt="a b") as reader:
        with pytest.raises(ChainsUsageError, match=REFUSAL) as refused:
            next(iter(reader.read_items()))
        with pytest.raises(ChainsUsageError, match=REFUSAL):
            list(reader)  # iterating is reading the items
        assert reader.read_header() == Started(prompt="a b")
        assert [t.text for t in reader.read_items()] == ["a", "b"]
        assert reader.read_footer() == Usage(tokens=2)
    return str(refused.value)


async def _async_refusal(url: str) -> str:
    async with AsyncClient(url, api_key=KEY) as client, await client.stream(TOKENS, prompt="a b") as reader:
        with pytest.raises(ChainsUsageError, match=REFUSAL) as refused:
            async for _ in reader.read_items():
                pass
        assert await reader.read_header() == Started(prompt="a b")
        assert [t.text async for t in reader.read_items()] == ["a", "b"]
        assert await reader.read_footer() == Usage(tokens=2)
    return str(refused.value)


async def test_the_sync_reader_refuses_an_unread_header_as_the_async_one_does(urls: dict[str, str]) -> None:
    sync_message = _sync_refusal(urls["Structured"])
    assert sync_message == await _async_refusal(urls["Structured"])
