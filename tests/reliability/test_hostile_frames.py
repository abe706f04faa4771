"""Hostile frames fed to the stream readers: clear errors, and memory bounded by the frame limit.

A stub reads whatever its dependency (or anything at that URL) sends. Random bytes, valid
streams with a byte changed, frames cut, repeated or reordered, and frame headers that
declare gigabytes must end in one of chains' stream errors, with a message, never in a
crash of another kind, a truncated stream taken as whole, or an allocation of what a
header declares before it has arrived.
"""

from __future__ import annotations

import asyncio
import itertools
import tracemalloc
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import chains
from chains.errors import ChainsError, StreamInterrupted
from chains.streaming import StreamShape, decode_framed, encode_framed, kinds, stream_reader
from chains.streaming.framing import FrameDecoder, FrameKind, FrameTooLarge, encode_frame, pack_header
from chains.stubs import StubOptions
from tests.helpers import ServerProcess, asgi_in_thread, generate_chain, running, unique_port
from tests.reliability.clients import ITEMS, Item, ItemStub, Started, Summary, payload
from tests.reliability.conftest import SAMPLE, record, rss_kib

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ITEM_SHAPE = StreamShape.of(kinds.ITEMS, item_type=Item)
TEXT_SHAPE = StreamShape.of(kinds.TEXT)
GIB = 2**30


async def _agen(values: Iterable[Any]) -> AsyncIterator[Any]:
    for value in values:
        yield value


def encoded(shape: StreamShape, values: list[Any]) -> bytes:
    """A valid framed stream of ``values``, as a server sends it."""

    async def run() -> bytes:
        return b"".join([chunk async for chunk in encode_framed(shape, _agen(values))])

    return asyncio.run(run())


def structured_stream(n: int) -> bytes:
    writer = chains.stream_writer(ITEMS)
    parts = [writer.yield_header(Started(n=n))]
    parts += [writer.yield_item(Item(i=i, text=payload(i, 9))) for i in range(n)]
    parts += [writer.yield_footer(Summary(items=n, characters=9 * n)), writer.end()]
    return b"".join(parts)


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


async def read_all(kind: str, chunks: Iterable[bytes]) -> list[Any]:
    """Everything a reader of ``kind`` makes of ``chunks``, or the error it raises."""
    if kind == "structured":
        reader = stream_reader(ITEMS, _agen(chunks))
        header = await reader.read_header()
        items = [item async for item in reader.read_items()]
        return [header, *items, await reader.read_footer()]
    shape = ITEM_SHAPE if kind == "items" else TEXT_SHAPE
    return [value async for value in decode_framed(shape, _agen(chunks))]


def outcome(kind: str, chunks: Iterable[bytes]) -> list[Any] | ChainsError:
    try:
        return asyncio.run(read_all(kind, chunks))
    except ChainsError as exc:  # anything else fails the test
        assert str(exc), f"{type(exc).__name__} without a message"
        return exc


VALID = {
    "items": encoded(ITEM_SHAPE, [Item(i=i, text=payload(i, 9)) for i in range(12)]),
    "text": encoded(TEXT_SHAPE, [payload(i, 9) for i in range(12)]),
    "structured": structured_stream(12),
}
KINDS = sorted(VALID)


@pytest.mark.parametrize("kind", KINDS)
def test_random_bytes_raise_a_stream_error(kind: str) -> None:
    @FUZZ
    @given(st.binary(max_size=400), st.lists(st.integers(0, 400), max_size=6))
    def fuzz(data: bytes, cuts: list[int]) -> None:
        result = outcome(kind, split(data, cuts))
        assert isinstance(result, ChainsError), f"random bytes read as a stream: {result!r}"

    fuzz()


def _frames(data: bytes) -> list[bytes]:
    decoder = FrameDecoder()
    return [encode_frame(k, p) for k, p in decoder.feed(data)]


_HEADER_BYTES = 5  # a kind byte and a 4-byte length


def _frame_starts(frames: list[bytes]) -> list[int]:
    starts, offset = [], 0
    for frame in frames:
        starts.append(offset)
        offset += len(frame)
    return starts


@st.composite
def mutated(draw: st.DrawFn, valid: bytes) -> tuple[bytes, bool]:
    """A valid stream changed in one of the ways a broken or hostile peer changes it, and
    whether the change may read as a valid stream of other items: repeated, dropped or
    reordered item frames (frames carry no sequence numbers; TCP keeps order and drops
    nothing), or a byte changed in a frame header. Any other change must be refused, or
    read with the original's shape."""
    frames = _frames(valid)
    how = draw(st.sampled_from(["flip", "insert", "delete", "repeat", "swap", "length", "drop"]))
    if how in ("flip", "insert", "delete"):
        at = draw(st.integers(0, len(valid) - 1))
        byte = bytes([draw(st.integers(0, 255))])
        # A byte changed in a frame's kind or length can make that frame swallow the next
        # ones exactly, which reads as a valid stream of other items: without a checksum
        # (TCP has one) no reader can tell. A change inside a payload can never re-frame.
        reframes = any(start <= at < start + _HEADER_BYTES for start in _frame_starts(frames))
        if how == "flip":
            return valid[:at] + byte + valid[at + 1 :], reframes
        return valid[:at] + (byte if how == "insert" else b"") + valid[at + (how == "delete") :], reframes
    at = draw(st.integers(0, len(frames) - 1))
    touched = [at]
    if how == "repeat":
        frames.insert(at, frames[at])
    elif how == "swap":
        other = draw(st.integers(0, len(frames) - 1))
        frames[at], frames[other] = frames[other], frames[at]
        touched.append(other)
    elif how == "length":  # a length field that lies, by a little or by a lot
        declared = draw(st.sampled_from([0, 1, 7, 2**16, 2**31, 2**32 - 1]))
        frames[at] = frames[at][:1] + declared.to_bytes(4, "big") + frames[at][5:]
        return b"".join(frames), False
    items_only = all(frames[i][0] == FrameKind.ITEM for i in touched)
    if how == "drop":  # only now: its kind was needed above
        del frames[at]
    return b"".join(frames), items_only


@pytest.mark.parametrize("kind", KINDS)
def test_mutated_streams_raise_a_stream_error_or_read_whole(kind: str) -> None:
    valid = VALID[kind]
    expected = outcome(kind, [valid])
    assert isinstance(expected, list) and expected

    @FUZZ
    @given(mutated(valid), st.lists(st.integers(0, len(valid) + 8), max_size=6))
    def fuzz(change: tuple[bytes, bool], cuts: list[int]) -> None:
        data, items_only = change
        result = outcome(kind, split(data, cuts))
        if isinstance(result, list) and not items_only:
            # Read without an error: only a change inside a payload that still parses can do
            # that (framing has no checksum; TCP has), so the shape is that of the original.
            assert len(result) == len(expected), (result, expected)

    fuzz()


@pytest.mark.parametrize("kind", KINDS)
def test_every_truncation_is_an_interruption(kind: str) -> None:
    """Cut a valid stream at every byte: each cut is StreamInterrupted, never a shorter stream."""
    valid = VALID[kind]
    for end in range(len(valid)):
        result = outcome(kind, [valid[:end]])
        assert isinstance(result, StreamInterrupted), (end, result)
    assert isinstance(outcome(kind, [valid]), list)
    record(f"frames_every_truncation_{kind}", stream_bytes=len(valid), cuts=len(valid), all_interrupted=True)


# -- memory ----------------------------------------------------------------------------------


def peak_while(action: Callable[[], object]) -> tuple[int, object]:
    """The peak of memory allocated (tracemalloc) while ``action`` runs, and what it returned."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        result = action()
        return tracemalloc.get_traced_memory()[1] - base, result
    finally:
        tracemalloc.stop()


def hostile(head: bytes, declared: int, sent: int, piece: bytes) -> Iterator[bytes]:
    """``head``, then a frame header declaring ``declared`` bytes, then ``sent`` bytes of it
    (the same piece again and again, so the source itself allocates nothing)."""
    yield head + pack_header(FrameKind.ITEM, declared)
    for _ in range(sent // len(piece)):
        yield piece


PIECE = b"x" * 65536


def test_a_frame_header_declaring_2_gib_is_refused_before_its_payload() -> None:
    consumed = 0

    def source() -> Iterator[bytes]:
        nonlocal consumed
        for chunk in hostile(ITEM_SHAPE.wire.preamble, 2 * GIB, 2 * GIB, PIECE):
            consumed += len(chunk)
            yield chunk

    def read() -> object:
        return outcome("items", source())

    peak, result = peak_while(read)
    assert isinstance(result, FrameTooLarge) and "declares 2048 MiB" in str(result), result
    assert peak < 512 * 1024, peak
    assert consumed <= len(ITEM_SHAPE.wire.preamble) + 5 + len(PIECE), consumed
    record("frames_2_gib_header", declared_bytes=2 * GIB, peak_allocated_bytes=peak, refused="FrameTooLarge")


@pytest.mark.parametrize("limit", [2**20, 8 * 2**20])
def test_a_reader_holds_no_more_than_its_frame_limit(limit: int) -> None:
    """A frame of exactly the limit, arriving in 1 KiB pieces: the reader holds the pieces, then
    joins them once (so, briefly, two copies); one byte more is refused at its header."""
    piece = b"y" * 1024

    def decode(declared: int) -> object:
        decoder = FrameDecoder(max_frame_size=limit)
        decoder.feed(pack_header(FrameKind.ITEM, declared))
        frames = []
        for _ in range(declared // len(piece)):
            # A new object per chunk, as from a socket: the decoder keeps each until the join.
            frames += decoder.feed(bytes(bytearray(piece)))
        return frames

    peak, frames = peak_while(lambda: decode(limit))
    assert isinstance(frames, list) and len(frames[0][1]) == limit
    # The pieces (each with its object header), then the joined payload: about twice the limit,
    # whatever the peer declares or sends.
    assert peak < 2.25 * limit, (peak, limit)
    with pytest.raises(FrameTooLarge):
        decode(limit + 1)
    record(f"frames_limit_{limit // 2**20}_mib", limit=limit, peak_allocated_bytes=peak, over_limit="refused")


def test_a_frame_that_never_completes_is_an_interruption_holding_only_what_arrived() -> None:
    peak, result = peak_while(
        lambda: outcome("items", hostile(ITEM_SHAPE.wire.preamble, 60 * 2**20, 2**20, PIECE))
    )
    assert isinstance(result, StreamInterrupted) and "inside a frame" in str(result), result
    assert peak < 3 * 2**20, peak  # what arrived (1 MiB, plus its join), not the 60 MiB declared


# -- a hostile peer over HTTP ------------------------------------------------------------------


class _HostileProducer:
    """A real HTTP service at a dependency's URL that answers with a valid preamble and then a
    frame header declaring 2 GiB, followed by payload for as long as the client reads."""

    def __init__(self) -> None:
        self.sent = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        headers = [(b"content-type", b"application/x-chains-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        first = ITEM_SHAPE.wire.preamble + pack_header(FrameKind.ITEM, 2 * GIB)
        await send({"type": "http.response.body", "body": first, "more_body": True})
        gone = asyncio.Event()

        async def watch() -> None:
            # uvicorn drops what is sent after the client left, so ask when that happens.
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()

        watcher = asyncio.create_task(watch())
        try:
            while self.sent < 2 * GIB and not gone.is_set():
                await send({"type": "http.response.body", "body": PIECE, "more_body": True})
                self.sent += len(PIECE)
        except OSError:
            return
        finally:
            watcher.cancel()


@pytest.fixture
def hostile_producer() -> Iterator[tuple[_HostileProducer, str]]:
    service = _HostileProducer()
    with asgi_in_thread(service, unique_port()) as url:
        yield service, url


def test_a_stub_refuses_a_2_gib_frame_from_a_hostile_peer(
    hostile_producer: tuple[_HostileProducer, str],
) -> None:
    service, url = hostile_producer

    async def consume() -> BaseException | None:
        stub = ItemStub(url, options=StubOptions(retries=0))
        try:
            async for _ in stub.run_remote(3):
                pass
        except ChainsError as exc:
            return exc
        finally:
            await stub.aclose()
        return None

    peak, error = peak_while(lambda: asyncio.run(consume()))
    assert isinstance(error, FrameTooLarge), error
    assert peak < 8 * 2**20, peak  # the client's and the in-process server's buffers, not 2 GiB
    assert service.sent < 64 * 2**20  # the stub hung up instead of reading on
    record("frames_hostile_peer_stub", peak_allocated_bytes=peak, peer_sent_bytes=service.sent)


def test_a_chainlet_reading_a_hostile_peer_fails_the_call_clearly_and_keeps_its_memory(
    hostile_producer: tuple[_HostileProducer, str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A real TextEntry process whose Producer URL leads to the hostile peer."""
    _, url = hostile_producer
    dirs = generate_chain(SAMPLE, tmp_path_factory.mktemp("hostile-peer"), entrypoint="TextEntry")
    entry = ServerProcess(
        dirs["TextEntry"], port=unique_port(), entrypoint=True, dependencies={"Producer": [url]}
    )
    with running(entry):
        assert entry.process is not None
        before = rss_kib(entry.process.pid)
        answers = []
        for _ in range(5):
            response = httpx.post(entry.url + "/run_remote", json={"n": 3}, timeout=30)
            answers.append(response)
        after = rss_kib(entry.process.pid)
        assert entry.process.poll() is None
    for response in answers:
        # Refused before the first item: a plain 500 whose detail says what happened.
        assert response.status_code == 500, response.text
        error = response.json()["error"]
        assert error["exc_type"] == "FrameTooLarge" and "over this reader's limit" in error["message"]
    assert after - before < 32 * 1024, (before, after)
    record(
        "frames_hostile_peer_chainlet",
        calls=len(answers),
        status=500,
        rss_kib_before=before,
        rss_kib_after=after,
    )
