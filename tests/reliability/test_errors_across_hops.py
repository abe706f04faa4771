"""Errors that cross hops: an overloaded dependency two hops from the entrypoint, and a stream
that outlives its caller's deadline, seen by every kind of caller (raw HTTP, a stub, `chains
call`), on the local target as its owner sees them (every hop's traceback) and as a deployed
chain shows them (type, message and request id only; the rest in the logs).

The chains are pushed as `chains push` does; every wait is bounded, traffic is to 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

import chains
from chains.streaming import FRAMED_MEDIA_TYPE, SSE
from chains.stubs import StubOptions
from chains.targets.state import read_state
from chains.wire import DEBUG_HEADER, REQUEST_ID_HEADER, debug_proof
from tests.helpers import wait_until
from tests.reliability.conftest import HERE, cli, metric, pushed, record, token_of

SAMPLE = HERE / "sample_chains" / "overload_chains.py"
CALLERS = 25
API_KEY = "Zq9w-errors-key"


class Overload(chains.StubBase):
    async def run_remote(self, hold: float) -> str:
        return await self.call_remote(hold=hold)  # type: ignore[no-any-return]


class Slow(chains.StubBase):
    async def run_remote(self, hold: float, count: int, gap: float) -> AsyncIterator[str]:
        async for text in self.stream_remote(hold=hold, count=count, gap=gap):
            yield text


@pytest.fixture(scope="module")
def local(chains_home: Path) -> Iterator[dict[str, str]]:
    """The two chains on the local target, whose owner (see ``_owner``) sees every hop's traceback."""
    with (
        pushed("OverloadEntry", "overload", SAMPLE) as unary,
        pushed("StreamOverloadEntry", "overload-stream", SAMPLE) as stream,
    ):
        yield {"unary": unary.entrypoint_url, "stream": stream.entrypoint_url}


@pytest.fixture(scope="module")
def deployed(chains_home: Path) -> Iterator[dict[str, str]]:
    """The same chains as a deployed target serves them (CHAINS_DEBUG_ERRORS=0, the default of
    docker and the exports), behind an API key."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CHAINS_DEBUG_ERRORS", "0")  # the supervisor hands it to every chainlet
        pushed_out = cli(
            "push",
            str(SAMPLE),
            "--entrypoint",
            "OverloadEntry",
            "--name",
            "public",
            "--api-key",
            API_KEY,
            "--json",
            timeout=120,
        )
        assert pushed_out.returncode == 0, pushed_out.stderr
        try:
            with pushed("StreamOverloadEntry", "public-stream", SAMPLE) as stream:
                unary = json.loads(pushed_out.stdout.splitlines()[-1])["entrypoint_url"]
                yield {"unary": unary, "stream": stream.entrypoint_url}
        finally:
            cli("stop", "public")


def _owner(name: str) -> dict[str, str]:
    """The header with which chain ``name``'s owner asks for every hop's detail, as `chains call` does."""
    return {DEBUG_HEADER: debug_proof(token_of(name))}


def _burst(url: str, body: dict[str, object], headers: dict[str, str] | None = None) -> list[httpx.Response]:
    """``CALLERS`` calls at once, each on a connection of its own."""

    def one(_: int) -> httpx.Response:
        with httpx.Client(timeout=60) as client:
            return client.post(url + "/run_remote", json=body, headers=headers or {})

    with ThreadPoolExecutor(CALLERS) as pool:
        return list(pool.map(one, range(CALLERS)))


def _check_refusals(responses: list[httpx.Response]) -> list[dict[str, object]]:
    statuses = Counter(r.status_code for r in responses)
    assert set(statuses) <= {200, 503}, statuses  # never a 500: the caller may retry
    assert statuses[503] >= 1 and statuses[200] >= 2, statuses
    errors = []
    for response in responses:
        if response.status_code == 503:
            assert int(response.headers["retry-after"]) >= 1
            error = response.json()["error"]
            assert (error["exc_type"], error["exc_module"]) == ("DependencyUnavailable", "chains.errors")
            errors.append(error)
    return errors


# Busy takes 2 calls at once and queues 8: 10 held calls fill it, and the next is refused.
HELD = 10


def _wait_for_saturation(name: str) -> None:
    """Wait until the held calls all reached the busy chainlet (its caller counts them in
    flight to it), so that the next call is refused: not a fixed sleep, which a loaded
    machine outlasts before the calls arrive."""
    middle, busy = ("Middle", "Busy") if name == "overload" else ("StreamMiddle", "BusyStream")
    url = read_state(name).replicas(middle)[0].url
    sample = f'chains_dependency_in_flight{{chainlet="{middle}",dependency="{busy}"}}'
    wait_until(lambda: metric(url, sample) >= HELD, 30, f"{HELD} calls held by {busy}", poll=0.02)


def _hops(error: dict[str, object]) -> list[dict[str, object]]:
    hops = []
    current: object = error
    while isinstance(current, dict):
        hops.append(current)
        current = current.get("cause")
    return hops


# -- item 1: the overloaded dependency, two hops away -------------------------------------------


def test_an_overloaded_dependency_two_hops_away_is_a_retryable_503(local: dict[str, str]) -> None:
    started = time.perf_counter()
    responses = _burst(local["unary"], {"hold": 1.5}, _owner("overload"))
    elapsed = time.perf_counter() - started
    assert all(r.json() == "done" for r in responses if r.status_code == 200)
    errors = _check_refusals(responses)
    for error in errors:
        # Raised in Middle, rebuilt in the entrypoint as itself (it was a TypeError), sent on.
        assert [hop["chainlet"] for hop in _hops(error)] == ["OverloadEntry", "Middle"]
        assert "Busy at http://127.0.0.1:" in str(error["message"]) and "answered 503" in str(
            error["message"]
        )
        assert "run_remote" in str(_hops(error)[1]["traceback"])  # the local target shows every hop
    statuses = Counter(r.status_code for r in responses)
    record(
        "overload_two_hops_unary",
        callers=CALLERS,
        ok=statuses[200],
        refused_503=statuses[503],
        other=CALLERS - statuses[200] - statuses[503],
        seconds=round(elapsed, 2),
    )


def test_a_stub_caller_catches_it_as_a_connection_error_and_its_retries_get_through(
    local: dict[str, str],
) -> None:
    async def main() -> tuple[int, int, float]:
        impatient = Overload(local["unary"], options=StubOptions(retries=0))
        patient = Overload(local["unary"], options=StubOptions(retries=10))
        try:
            # Busy held by 10 long calls (2 running, 8 queued): the next one is refused.
            holding = [asyncio.create_task(impatient.run_remote(3.0)) for _ in range(HELD)]
            await asyncio.to_thread(_wait_for_saturation, "overload")
            with pytest.raises(ConnectionError) as refused:
                await impatient.run_remote(0.0)
            assert isinstance(refused.value, chains.DependencyUnavailable)
            assert "answered 503" in str(refused.value)
            assert await asyncio.gather(*holding) == ["done"] * HELD
            # The same burst from callers that retry: each 503 is waited out and retried.
            started = time.perf_counter()
            answers = await asyncio.gather(*(patient.run_remote(0.3) for _ in range(CALLERS)))
            return answers.count("done"), CALLERS, time.perf_counter() - started
        finally:
            await impatient.aclose()
            await patient.aclose()

    done, callers, elapsed = asyncio.run(main())
    assert done == callers
    record("overload_retrying_callers", callers=callers, done=done, seconds=round(elapsed, 2))


def test_an_overloaded_dependency_of_a_framed_stream_is_a_retryable_503(local: dict[str, str]) -> None:
    headers = {"accept": FRAMED_MEDIA_TYPE, **_owner("overload-stream")}
    responses = _burst(local["stream"], {"hold": 1.5, "count": 3, "gap": 0.0}, headers)
    for response in responses:
        if response.status_code == 200:
            assert response.headers["content-type"].startswith(FRAMED_MEDIA_TYPE)
    for error in _check_refusals(responses):
        assert [hop["chainlet"] for hop in _hops(error)] == ["StreamOverloadEntry", "StreamMiddle"]
    statuses = Counter(r.status_code for r in responses)
    record("overload_two_hops_framed_stream", callers=CALLERS, ok=statuses[200], refused_503=statuses[503])


def test_a_stream_past_its_deadline_ends_as_a_timeout_error_for_a_stub_caller(local: dict[str, str]) -> None:
    async def main() -> tuple[list[str], BaseException]:
        stub = Slow(local["stream"], options=StubOptions(retries=0, timeout_sec=1.5))
        received: list[str] = []
        try:
            with pytest.raises(TimeoutError) as caught:
                async for text in stub.run_remote(0.0, 40, 0.1):
                    received.append(text)
            return received, caught.value
        finally:
            await stub.aclose()

    received, error = asyncio.run(main())
    assert isinstance(error, chains.DeadlineExceeded) and isinstance(error, chains.RemoteError)
    assert "TypeError" not in str(error)
    assert 1 <= len(received) < 40 and received == [f"{i};" for i in range(len(received))]
    assert error.detail is not None
    record("deadline_mid_stream", items_before_error=len(received), hops=len(error.detail.hops()))


def test_chains_call_prints_a_clean_error_for_the_overloaded_dependency(local: dict[str, str]) -> None:
    def saturate(name: str, url: str, body: Mapping[str, object]) -> ThreadPoolExecutor:
        pool = ThreadPoolExecutor(HELD)
        for _ in range(HELD):
            pool.submit(httpx.post, url + "/run_remote", json=body, timeout=30)
        _wait_for_saturation(name)
        return pool

    for name, body in (
        ("overload", {"hold": 4.0}),
        ("overload-stream", {"hold": 4.0, "count": 1, "gap": 0.0}),
    ):
        url = local["unary" if name == "overload" else "stream"]
        pool = saturate(name, url, body)
        try:
            quick = json.dumps({**body, "hold": 0.0})
            result = cli("call", name, "--json", quick, timeout=60)
        finally:
            pool.shutdown(wait=True)
        assert result.returncode == 1, (result.stdout, result.stderr)
        assert result.stderr.startswith("error: HTTP 503") or "DependencyUnavailable" in result.stderr
        assert "chains.errors.DependencyUnavailable" in result.stderr, result.stderr
        assert "Traceback (most recent call last)" not in result.stderr and "TypeError" not in result.stderr


# -- item 8: what leaves a deployed chain -----------------------------------------------------


def test_a_deployed_chain_sends_type_message_and_request_id_only(deployed: dict[str, str]) -> None:
    key = {"authorization": f"Bearer {API_KEY}"}
    responses = _burst(deployed["unary"], {"hold": 1.5}, key)
    for response, error in zip(
        [r for r in responses if r.status_code == 503], _check_refusals(responses), strict=True
    ):
        assert error["request_id"] == response.headers[REQUEST_ID_HEADER]
        assert error["chainlet"] == "OverloadEntry" and "answered 503" in str(error["message"])
        assert error["traceback"] == "" and error["cause"] is None
        assert ".py" not in response.text  # no server file path
    # The full detail stays in the logs, found by the request id.
    refused = [r for r in responses if r.status_code == 503]
    logs = cli("logs", "public", "OverloadEntry", "--lines", "2000").stdout
    assert refused[0].headers[REQUEST_ID_HEADER] in logs and "--- in chainlet Middle ---" in logs
    record(
        "public_errors_unary",
        callers=CALLERS,
        refused_503=len(refused),
        bodies_with_a_traceback=sum('"traceback":""' not in r.text.replace(" ", "") for r in refused),
        request_ids_found_in_logs=sum(r.headers[REQUEST_ID_HEADER] in logs for r in refused),
    )


def test_a_deployed_chain_sends_a_streams_error_without_tracebacks(deployed: dict[str, str]) -> None:
    url = deployed["stream"] + "/run_remote"
    body = {"hold": 0.0, "count": 40, "gap": 0.1}
    deadline = {"x-chains-timeout": "1.5", REQUEST_ID_HEADER: "rid-public-sse"}

    async def sse_error() -> dict[str, object]:
        async with httpx.AsyncClient(timeout=30) as client:
            headers = {**deadline, "accept": "text/event-stream"}
            async with client.stream("POST", url, json=body, headers=headers) as response:
                assert response.status_code == 200
                async for event in SSE.from_chunks(response.aiter_bytes()):
                    if event.event == "error":
                        error: dict[str, object] = json.loads(event.data)
                        return error
        raise AssertionError("the stream ended without an error event")

    error = asyncio.run(sse_error())
    assert (error["exc_type"], error["exc_module"]) == ("DeadlineExceeded", "chains.errors")
    assert error["request_id"] == "rid-public-sse"
    assert error["traceback"] == "" and error["cause"] is None

    # The framed form, read as a chainlet reads it: raised as a TimeoutError, with no traceback.
    framed = httpx.post(url, json=body, headers={**deadline, "accept": FRAMED_MEDIA_TYPE}, timeout=30)
    assert framed.status_code == 200 and b".py" not in framed.content

    async def read_framed() -> BaseException:
        stub = Slow(deployed["stream"], options=StubOptions(retries=0, timeout_sec=1.5))
        try:
            with pytest.raises(TimeoutError) as caught:
                async for _ in stub.run_remote(0.0, 40, 0.1):
                    pass
            return caught.value
        finally:
            await stub.aclose()

    raised = asyncio.run(read_framed())
    assert isinstance(raised, chains.RemoteError) and raised.detail is not None
    assert raised.detail.traceback == "" and raised.detail.cause is None and raised.detail.request_id


# -- item 6: the API key guards /metrics, and a key that cannot match is refused ---------------


def test_the_entrypoints_metrics_need_the_api_key(deployed: dict[str, str]) -> None:
    url = deployed["unary"] + "/metrics"
    assert httpx.get(url, timeout=10).status_code == 401
    assert httpx.get(url, headers={"authorization": "Bearer wrong"}, timeout=10).status_code == 401
    answer = httpx.get(url, headers={"authorization": f"Bearer {API_KEY}"}, timeout=10)
    assert answer.status_code == 200 and 'dependency="Middle"' in answer.text
    assert httpx.get(url, headers={"x-api-key": API_KEY}, timeout=10).status_code == 200
    # Without a key, the entrypoint's metrics stay open as before.
    assert httpx.get(deployed["stream"] + "/metrics", timeout=10).status_code == 200


@pytest.mark.parametrize("key", [" Zq9w-key", "Zq9w-key ", "Zq9w-clé"])
def test_an_api_key_that_could_never_match_is_refused_at_push(chains_home: Path, key: str) -> None:
    result = cli("push", str(SAMPLE), "--entrypoint", "OverloadEntry", "--name", "bad-key", "--api-key", key)
    assert result.returncode != 0
    assert "error: the API key has a" in result.stderr and "printable ASCII without spaces" in result.stderr
    assert "Traceback" not in result.stderr and "Zq9w" not in result.stderr
    assert not (chains_home / "bad-key" / "state.json").exists()
