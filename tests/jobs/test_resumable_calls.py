"""A resumable ``POST /run_remote`` served as a call: its caller's deadline (real chainlet
processes, real HTTP)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from chains.deploy import ChainHandle
from chains.streaming.sse import SSEDecoder

RESUMABLE = {"X-Chains-Resumable": "1"}


def _items(content: bytes) -> list[str]:
    return [e.data for e in SSEDecoder().feed(content) if e.event is None and e.data]


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
