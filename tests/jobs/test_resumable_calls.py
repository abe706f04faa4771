"""A resumable ``POST /run_remote`` served as a call: its request-log line and metrics, its
trace span with the run's own calls under it, its caller's deadline, and the concurrency slot
its run holds until it ends (real chainlet processes, real HTTP)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import httpx
import pytest

from chains.deploy import ChainHandle, stop_chain
from chains.streaming.sse import SSEDecoder
from tests.helpers import Cli, wait_until
from tests.jobs.conftest import push

ONE_SLOT_CHAIN = Path(__file__).parent / "one_slot_chain.py"
RESUMABLE = {"X-Chains-Resumable": "1"}
REQUEST_ID = "5eed" * 8

LINE = re.compile(r" chains\.requests: (\w+) (\d{3}) [\d.]+ms(?: (\d+) items(, then failed)?)?$")


def _metric(url: str, name: str) -> float:
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


def _request_lines(cli: Cli, chain: str, chainlet: str) -> list[tuple[str, str | None, bool]]:
    """The request-log lines of ``chainlet``: (status, items, failed)."""
    logs = cli.run("logs", chain, chainlet, "--lines", "500").stdout
    found = [LINE.search(line) for line in logs.splitlines()]
    return [(m.group(2), m.group(3), m.group(4) is not None) for m in found if m and m.group(1) == chainlet]


def _items(content: bytes) -> list[str]:
    return [e.data for e in SSEDecoder().feed(content) if e.event is None and e.data]


def test_a_resumable_call_is_logged_metered_and_traced_with_its_runs_calls_under_it(
    streaming: ChainHandle, chains_home: Path, tmp_path: Path
) -> None:
    url = streaming.entrypoint_url
    body = {"count": 3, "log": str(tmp_path / "runs")}
    # A deadline far off changes nothing but that the run is bounded by it.
    headers = {**RESUMABLE, "x-chains-request-id": REQUEST_ID, "x-chains-timeout": "60"}
    answer = httpx.post(url + "/run_remote", json=body, headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    assert _items(answer.content) == ["t0", "t1", "t2"]
    assert answer.headers["x-chains-request-id"] == REQUEST_ID
    run_id = answer.headers["x-chains-run-id"]
    bad = httpx.post(url + "/run_remote", json=body, headers={"X-Chains-Resumable": "yes"}, timeout=30)
    assert bad.status_code == 400

    entry = 'chainlet="StreamEntry"'
    assert _metric(url, f'chains_calls_total{{{entry},status="200"}}') == 1
    assert _metric(url, f'chains_calls_total{{{entry},status="400"}}') == 1
    assert _metric(url, f"chains_in_flight{{{entry}}}") == 0
    assert _metric(url, f"chains_call_duration_seconds_count{{{entry}}}") == 2

    cli = Cli(chains_home)
    wait_until(
        lambda: len(_request_lines(cli, "streaming-jobs", "StreamEntry")) == 2, 20, "two request-log lines"
    )
    assert _request_lines(cli, "streaming-jobs", "StreamEntry") == [("200", "3", False), ("400", None, False)]

    # The trace named by the request id: the POST's span, and the run's call to Tokens under it.
    def spans() -> list[dict[str, Any]]:
        shown = cli.run("trace", "streaming-jobs", REQUEST_ID, "--json", check=False)
        found: list[dict[str, Any]] = json.loads(shown.stdout) if shown.returncode == 0 else []
        return found

    wait_until(lambda: len(spans()) >= 3, 60, "three spans stored")
    stored = spans()
    assert {s["trace_id"] for s in stored} == {REQUEST_ID}
    (post,) = [s for s in stored if s["name"] == "StreamEntry.run_remote"]
    assert post["parent_id"] == "" and post["kind"] == "server"
    assert post["attributes"]["chains.run_id"] == run_id
    assert post["attributes"]["http.response.status_code"] == 200
    (call,) = [s for s in stored if s["name"] == "call Tokens"]
    assert call["parent_id"] == post["span_id"]
    (tokens,) = [s for s in stored if s["name"] == "Tokens.run_remote"]
    assert tokens["parent_id"] == call["span_id"]
    assert tokens["attributes"]["chains.stream.items"] == 3


def test_a_resumable_run_ends_at_its_callers_deadline_with_deadline_exceeded(
    streaming: ChainHandle, tmp_path: Path
) -> None:
    # Two tokens, then a pause far past the caller's deadline of 2 s (and within the run timeout).
    body = {"count": 5, "log": str(tmp_path / "runs"), "pause_after": 1, "pause": 600}
    headers = {**RESUMABLE, "x-chains-timeout": "2"}
    with httpx.Client(base_url=streaming.entrypoint_url, timeout=60) as http:
        answer = http.post("/run_remote", json=body, headers=headers)
        assert answer.status_code == 200, answer.text
        events = SSEDecoder().feed(answer.content)
        assert _items(answer.content) == ["t0", "t1"]
        assert events[-1].event == "error"
        assert json.loads(events[-1].data)["exc_type"] == "DeadlineExceeded"
        run = http.get(f"/async_request/{answer.headers['x-chains-run-id']}").json()
    assert run["status"] == "FAILED"
    assert [error["code"] for error in run["errors"]] == ["DeadlineExceeded"]


@pytest.fixture
def one_slot(chains_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ChainHandle]:
    """OneSlot pushed with one slot and room for one call to wait for it."""
    monkeypatch.setenv("CHAINS_MAX_QUEUE", "1")
    handle = push("one-slot", file=ONE_SLOT_CHAIN, entrypoint="OneSlot")
    try:
        yield handle
    finally:
        stop_chain("one-slot", grace=5)


def test_a_resumable_run_holds_its_slot_after_its_connection_until_it_ends(
    one_slot: ChainHandle, chains_home: Path
) -> None:
    url = one_slot.entrypoint_url
    in_flight = 'chains_in_flight{chainlet="OneSlot"}'
    with httpx.Client(base_url=url, timeout=30) as http:
        # A run that streams one token, then waits until it is cancelled; its connection is closed.
        paused = {"count": 2, "pause_after": 0, "pause": 600}
        with http.stream("POST", "/run_remote", json=paused, headers=RESUMABLE) as first:
            assert first.status_code == 200
            run_id = first.headers["x-chains-run-id"]
            for line in first.iter_lines():
                if line == "data: t0":
                    break
        assert _metric(url, in_flight) == 1  # the run, though its caller has gone

        # A plain call and a resumable one: one waits for the slot the run holds, the queue is
        # then full, and the other is refused at once.
        def call(headers: dict[str, str]) -> httpx.Response:
            return httpx.post(url + "/run_remote", json={"count": 1}, headers=headers, timeout=60)

        with ThreadPoolExecutor(2) as pool:
            calls = [pool.submit(call, {}), pool.submit(call, RESUMABLE)]
            done, waiting = wait(calls, timeout=30, return_when=FIRST_COMPLETED)
            assert len(done) == 1 and len(waiting) == 1, "one call refused, one waiting for the slot"
            refused = done.pop().result()
            assert refused.status_code == 503
            assert refused.headers["retry-after"] == "1"
            assert "over capacity" in refused.json()["detail"]
            assert _metric(url, in_flight) == 1

            cancel = http.delete(f"/async_request/{run_id}")
            assert cancel.status_code == 200 and cancel.json()["canceled"]
            served = waiting.pop().result(timeout=30)  # the run's end gave its slot to the waiting call
            assert served.status_code == 200
            assert "t0" in served.text
    wait_until(lambda: _metric(url, in_flight) == 0, 10, "nothing in flight")
    # The cut call's line is its connection's: 200 and the one item it carried, though its run
    # went on; the refusal's is 503; the call let in once the run ended streamed its one item.
    cli = Cli(chains_home)
    wait_until(lambda: len(_request_lines(cli, "one-slot", "OneSlot")) == 3, 20, "three request-log lines")
    lines = _request_lines(cli, "one-slot", "OneSlot")
    assert sorted(lines, key=str) == sorted([("200", "1", False)] * 2 + [("503", None, False)], key=str)
