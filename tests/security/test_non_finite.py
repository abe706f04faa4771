"""NaN, infinities and numbers past a double's range: a value arrives as sent or is refused
at the door with 422, in every wire form (JSON, MessagePack, streams) and in ``run_local``.

JSON has no NaN; pydantic writes one as ``null``, which the next hop then refuses for a
float (a 500 naming the internal chainlet) or takes for "no value".
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import httpx
import msgpack
import pytest

import chains
from chains.deploy import ChainHandle
from chains.wire import BINARY_MEDIA_TYPE
from tests.security.conftest import pushed
from tests.security.sample_chains.security_chains import FloatEntry, StreamEntry

NON_FINITE = [b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-1e400", b"1" + b"0" * 400]


@pytest.fixture(scope="module")
def chain(chains_home: Path) -> Iterator[ChainHandle]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CHAINS_DEBUG_ERRORS", "0")  # what a deployed chain's callers see
        with pushed("FloatEntry", "finite-json") as handle:
            yield handle


@pytest.fixture(scope="module")
def binary_chain(chains_home: Path) -> Iterator[ChainHandle]:
    with pushed("BinaryEntry", "finite-binary") as handle:
        yield handle


@pytest.fixture(scope="module")
def stream_chain(chains_home: Path) -> Iterator[ChainHandle]:
    with pushed("StreamEntry", "finite-stream") as handle:
        yield handle


def post(url: str, body: bytes, content_type: str = "application/json") -> httpx.Response:
    return httpx.post(f"{url}/run_remote", content=body, headers={"content-type": content_type}, timeout=20)


@pytest.mark.parametrize("number", NON_FINITE)
def test_json_non_finite_numbers_are_refused_at_the_door(chain: ChainHandle, number: bytes) -> None:
    answer = post(chain.entrypoint_url, b'{"x": ' + number + b"}")
    assert answer.status_code == 422, answer.text
    assert "finite" in answer.text and "Leaf" not in answer.text
    # Where the parameter takes anything, the JSON words are refused all the same.
    if number.isalpha() or number.startswith(b"-I"):
        answer = post(chain.entrypoint_url, b'{"x": 1, "extra": {"deep": [' + number + b"]}}")
        assert answer.status_code == 422 and "NaN and Infinity" in answer.text, answer.text


def test_finite_numbers_arrive_as_sent(chain: ChainHandle) -> None:
    for value in (1.7976931348623157e308, -5e-324, 0.1, -0.0):
        answer = post(chain.entrypoint_url, b'{"x": ' + repr(value).encode() + b"}")
        assert answer.status_code == 200 and answer.json() == value
    # The words inside a string are no number: served.
    answer = post(chain.entrypoint_url, b'{"x": 2, "extra": "NaN and Infinity"}')
    assert answer.status_code == 200 and answer.json() == 2


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_messagepack_non_finite_floats_are_refused(binary_chain: ChainHandle, value: float) -> None:
    body = msgpack.packb({"x": value})
    answer = post(binary_chain.entrypoint_url, body, BINARY_MEDIA_TYPE)
    assert answer.status_code == 422 and "finite" in answer.text, answer.text
    good = post(binary_chain.entrypoint_url, msgpack.packb({"x": 1.25}), BINARY_MEDIA_TYPE)
    assert good.status_code == 200 and good.json() == 1.25


def test_a_streams_arguments_and_its_get_form_refuse_them(stream_chain: ChainHandle) -> None:
    url = stream_chain.entrypoint_url
    for number in (b"NaN", b"1e400"):
        answer = post(url, b'{"start": ' + number + b"}")
        assert answer.status_code == 422, answer.text
        answer = httpx.get(f"{url}/run_remote", params={"start": number.decode()}, timeout=20)
        assert answer.status_code == 422, answer.text
    answer = httpx.post(f"{url}/run_remote", json={"start": 0.5}, timeout=20)
    assert answer.status_code == 200


async def test_run_local_refuses_them_as_a_deployed_chain_would() -> None:
    with chains.run_local():
        entry = FloatEntry()
        for value in (math.nan, math.inf, -math.inf):
            with pytest.raises(ValueError, match="finite"):
                await entry.run_remote(x=value)
        assert await entry.run_remote(x=1e308) == 1e308
        streaming = StreamEntry()
        with pytest.raises(ValueError, match="finite"):
            await anext(streaming.run_remote(start=math.nan))


def test_a_chainlet_that_yields_nan_fails_the_stream_instead_of_sending_null() -> None:
    from chains.streaming.schema import json_codec

    codec = json_codec(float, "item")
    assert codec.dump(1.5) == b"1.5"
    with pytest.raises(Exception, match="finite"):
        codec.dump(math.nan)
