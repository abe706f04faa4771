"""Streams that survive a cut connection (issue 31): a resumable ``POST /run_remote`` and a job's
events read through a proxy that really cuts the first connections mid-answer. Every token (and a
structured stream's header and footer) must arrive once, in order, and the chain's log must show
one run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from chains import stream_types
from chains.client import AsyncClient, Client
from chains.deploy import ChainHandle, stop_chain
from chains.errors import ChainsRuntimeError, ChainsUsageError, StreamInterrupted, StreamProtocolError
from chains.streaming.sse import SSE, SSEDecoder
from tests.jobs.conftest import log_lines, push
from tests.jobs.cutting_proxy import CuttingProxy
from tests.jobs.structured_stream_chain import PIECES, Started, Usage
from tests.jobs.structured_stream_chain import Piece as StructuredPiece
from tests.jobs.typed_stream_chain import Piece

TYPED_CHAIN = Path(__file__).parent / "typed_stream_chain.py"
STRUCTURED_CHAIN = Path(__file__).parent / "structured_stream_chain.py"

TOKENS = [f"t{i}" for i in range(80)]


def test_job_events_resume_by_themselves_after_cuts(streaming: ChainHandle, tmp_path: Path) -> None:
    log = tmp_path / "runs"
    with Client(streaming.entrypoint_url) as direct:
        job_id = direct.submit(count=len(TOKENS), log=str(log), gap=0.02).id
    with CuttingProxy(streaming.entrypoint_url, cuts=[300] * 3) as proxy, Client(proxy.url) as client:
        events = list(client.job(job_id).events())
        assert proxy.cut == 3  # the cuts happened: the events came over four connections
    assert [e.data for e in events] == TOKENS
    assert [e.id for e in events] == [str(i) for i in range(1, len(TOKENS) + 1)]
    assert log_lines(log) == ["run"]


async def test_async_job_events_resume_by_themselves_after_cuts(
    streaming: ChainHandle, tmp_path: Path
) -> None:
    log = tmp_path / "runs"
    async with AsyncClient(streaming.entrypoint_url) as direct:
        job_id = (await direct.submit(count=len(TOKENS), log=str(log), gap=0.02)).id
    with CuttingProxy(streaming.entrypoint_url, cuts=[300] * 3) as proxy:
        async with AsyncClient(proxy.url) as client:
            events = [event async for event in client.job(job_id).events()]
        assert proxy.cut == 3
    assert [e.data for e in events] == TOKENS
    assert log_lines(log) == ["run"]


def test_events_give_up_with_stream_interrupted_once_the_tries_are_spent(
    streaming: ChainHandle, tmp_path: Path
) -> None:
    log = tmp_path / "runs"
    with Client(streaming.entrypoint_url) as direct:
        job_id = direct.submit(count=len(TOKENS), log=str(log), gap=0.02).id
    # The first connection brings some events; every try after it is cut before its answer.
    with CuttingProxy(streaming.entrypoint_url, cuts=[400] + [0] * 10) as proxy, Client(proxy.url) as client:
        seen = []
        with pytest.raises(StreamInterrupted, match=r"events\(last_event_id=\d+\)"):
            for event in client.job(job_id).events():
                seen.append(event.data)
        assert proxy.cut == 7  # the first connection and six tries
    assert seen and seen == TOKENS[: len(seen)]


def _read_until_cut(response: httpx.Response) -> list[SSE]:
    decoder = SSEDecoder()
    events: list[SSE] = []
    try:
        for chunk in response.iter_bytes():
            events.extend(e for e in decoder.feed(chunk) if e.data or e.event)
    except httpx.HTTPError:
        pass
    return events


def test_a_resumable_run_remote_goes_on_after_a_cut_and_is_read_to_its_end(
    streaming: ChainHandle, tmp_path: Path
) -> None:
    log = tmp_path / "runs"
    body = {"count": len(TOKENS), "log": str(log), "gap": 0.02}
    with CuttingProxy(streaming.entrypoint_url, cuts=[500] * 2) as proxy:
        with (
            httpx.Client(timeout=30) as http,
            http.stream(
                "POST", proxy.url + "/run_remote", json=body, headers={"X-Chains-Resumable": "1"}
            ) as answer,
        ):
            assert answer.status_code == 200
            assert answer.headers["content-type"].startswith("text/event-stream")
            run_id = answer.headers["x-chains-run-id"]
            assert answer.headers["content-location"] == f"/async_request/{run_id}/events"
            first = _read_until_cut(answer)
        assert proxy.cut == 1 and first, "the live answer was cut after some events"
        assert all(e.id is not None for e in first)
        last = int(first[-1].id or 0)
        # The client reads the rest from the last id it saw, through one more cut, by itself.
        with Client(proxy.url) as client:
            rest = list(client.job(run_id).events(last_event_id=last))
        assert proxy.cut == 2
    assert [e.data for e in first] + [e.data for e in rest] == TOKENS
    assert log_lines(log) == ["run"]  # one run: the cut did not cancel it, the reconnection did not rerun it


def test_an_eventsource_style_reconnection_gets_the_rest_of_the_same_run(
    streaming: ChainHandle, tmp_path: Path
) -> None:
    log = tmp_path / "runs"
    body = {"count": 5, "log": str(log), "gap": 0.01}
    with httpx.Client(base_url=streaming.entrypoint_url, timeout=30) as http:
        answer = http.post("/run_remote", json=body, headers={"X-Chains-Resumable": "1"})
        events = SSEDecoder().feed(answer.content)
        assert [e.data for e in events if e.event is None and e.data] == ["t0", "t1", "t2", "t3", "t4"]
        assert events[-1].event == "end"
        again = http.get(answer.headers["content-location"], headers={"Last-Event-ID": "3"})
        assert [e.data for e in SSEDecoder().feed(again.content) if e.event is None and e.data] == [
            "t3",
            "t4",
        ]
        plain = http.post("/run_remote", json=body)  # without the header: the plain stream, as before
        assert "x-chains-run-id" not in plain.headers
        assert not plain.headers["content-type"].startswith("text/event-stream")
    assert log_lines(log) == ["run", "run"]


def test_resumable_requests_that_cannot_be_served_are_refused_saying_why(
    streaming: ChainHandle, pushed: ChainHandle, tmp_path: Path
) -> None:
    body = {"count": 2, "log": str(tmp_path / "runs")}
    bad = httpx.post(
        streaming.entrypoint_url + "/run_remote", json=body, headers={"X-Chains-Resumable": "yes"}
    )
    assert bad.status_code == 400 and "send '1'" in bad.json()["detail"]
    one_value = httpx.post(
        pushed.entrypoint_url + "/run_remote", json={}, headers={"X-Chains-Resumable": "1"}
    )
    assert one_value.status_code == 400 and "streaming endpoints" in one_value.json()["detail"]


def test_the_client_reads_a_resumable_stream_through_cuts_each_item_once(
    streaming: ChainHandle, tmp_path: Path
) -> None:
    log = tmp_path / "runs"
    with CuttingProxy(streaming.entrypoint_url, cuts=[500] * 3) as proxy, Client(proxy.url) as client:
        got = list(client.resumable_stream(str, count=len(TOKENS), log=str(log), gap=0.02))
        assert proxy.cut == 3
    assert got == TOKENS
    assert log_lines(log) == ["run"]


async def test_the_async_client_reads_a_resumable_stream_through_cuts_each_item_once(
    streaming: ChainHandle, tmp_path: Path
) -> None:
    log = tmp_path / "runs"
    with CuttingProxy(streaming.entrypoint_url, cuts=[500] * 3) as proxy:
        async with AsyncClient(proxy.url) as client:
            got = [
                item
                async for item in await client.resumable_stream(
                    str, count=len(TOKENS), log=str(log), gap=0.02
                )
            ]
        assert proxy.cut == 3
    assert got == TOKENS
    assert log_lines(log) == ["run"]


@pytest.fixture
def typed(chains_home: Path) -> Iterator[ChainHandle]:
    handle = push("typed-stream", file=TYPED_CHAIN, entrypoint="Pieces")
    try:
        yield handle
    finally:
        stop_chain("typed-stream", grace=5)


def test_typed_items_of_a_resumable_stream_come_once_in_order_through_cuts(
    typed: ChainHandle, tmp_path: Path
) -> None:
    log = tmp_path / "runs"
    with CuttingProxy(typed.entrypoint_url, cuts=[700] * 3) as proxy, Client(proxy.url) as client:
        got = list(client.resumable_stream(Piece, count=60, log=str(log), gap=0.01))
        assert proxy.cut == 3
    assert got == [Piece(index=i, text=f"piece {i}\nof 60") for i in range(60)]
    assert log_lines(log) == ["run"]


async def test_async_typed_items_of_a_resumable_stream_come_once_in_order_through_cuts(
    typed: ChainHandle, tmp_path: Path
) -> None:
    log = tmp_path / "runs"
    with CuttingProxy(typed.entrypoint_url, cuts=[700] * 3) as proxy:
        async with AsyncClient(proxy.url) as client:
            got = [piece async for piece in await client.resumable_stream(Piece, count=60, log=str(log))]
        assert proxy.cut == 3
    assert [piece.index for piece in got] == list(range(60))
    assert log_lines(log) == ["run"]


def test_without_a_job_store_a_resumable_stream_is_refused_naming_the_setting(
    chains_home: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CHAINS_JOBS_STORE", "off")
    handle = push("typed-no-store", file=TYPED_CHAIN, entrypoint="Pieces")
    try:
        body = {"count": 2, "log": str(tmp_path / "runs")}
        answer = httpx.post(
            handle.entrypoint_url + "/run_remote", json=body, headers={"X-Chains-Resumable": "1"}
        )
        assert answer.status_code == 400 and "CHAINS_JOBS_STORE" in answer.json()["detail"]
        refused = pytest.raises(ChainsRuntimeError, match=r"answered 400: .*CHAINS_JOBS_STORE")
        with Client(handle.entrypoint_url) as client, refused:
            client.resumable_stream(Piece, **body)
        assert not (tmp_path / "runs").exists()  # refused before anything ran
    finally:
        stop_chain("typed-no-store", grace=5)


@pytest.fixture
def structured(chains_home: Path) -> Iterator[ChainHandle]:
    handle = push("structured-stream", file=STRUCTURED_CHAIN, entrypoint="Parts")
    try:
        yield handle
    finally:
        stop_chain("structured-stream", grace=5)


PIECE_LIST = [StructuredPiece(index=i, text=f"piece {i}\nof 60") for i in range(60)]


def test_a_resumable_structured_stream_gives_header_items_and_footer_once_through_cuts(
    structured: ChainHandle, tmp_path: Path
) -> None:
    log = tmp_path / "runs"
    with (
        CuttingProxy(structured.entrypoint_url, cuts=[700] * 3) as proxy,
        Client(proxy.url) as client,
        client.resumable_stream(PIECES, count=60, log=str(log), gap=0.01) as reader,
    ):
        with pytest.raises(ChainsUsageError, match="read_header"):
            next(iter(reader.read_items()))  # the header comes first, as stream() has it
        assert reader.read_header() == Started(count=60)
        got = list(reader.read_items())
        assert reader.read_footer() == Usage(pieces=60)
        assert proxy.cut == 3  # the cuts happened, mid-items: the parts came over four connections
    assert got == PIECE_LIST
    assert log_lines(log) == ["run"]


async def test_async_a_resumable_structured_stream_gives_header_items_and_footer_once_through_cuts(
    structured: ChainHandle, tmp_path: Path
) -> None:
    log = tmp_path / "runs"
    with CuttingProxy(structured.entrypoint_url, cuts=[700] * 3) as proxy:
        async with AsyncClient(proxy.url) as client:
            reader = await client.resumable_stream(PIECES, count=60, log=str(log), gap=0.01)
            async with reader:
                assert await reader.read_header() == Started(count=60)
                got = [piece async for piece in reader.read_items()]
                assert await reader.read_footer() == Usage(pieces=60)
        assert proxy.cut == 3
    assert got == PIECE_LIST
    assert log_lines(log) == ["run"]


def test_a_resumable_structured_stream_read_with_other_types_names_the_part(
    structured: ChainHandle, tmp_path: Path
) -> None:
    # The SSE form carries no fingerprint: other types show as the part that does not fit.
    other = stream_types(StructuredPiece, header_type=Usage, footer_type=Usage)
    with Client(structured.entrypoint_url) as client:
        reader = client.resumable_stream(other, count=2, log=str(tmp_path / "runs"))
        with pytest.raises(StreamProtocolError, match=r"(?s)header frame of .* not a valid Usage: .*pieces"):
            reader.read_header()
        items_only = list(client.resumable_stream(StructuredPiece, count=3, log=str(tmp_path / "runs")))
    assert [piece.index for piece in items_only] == [0, 1, 2]  # an item type skips the header and footer
