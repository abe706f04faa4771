"""The JSON ``chains ui`` serves its page from, read over HTTP from the real command serving a
real pushed chain: request traces listed without the batches that served them (each batch one
click away from a request), the chain's async jobs from its job store, and the reason a
chainlet last went down, as ``chains status`` gives it."""

from __future__ import annotations

import concurrent.futures
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import dashboard as run_dashboard
from tests.helpers import origin_of, wait_until

CHAIN_FILE = Path(__file__).with_name("chains") / "batched.py"
CHAIN = "batched-dashboard"


@pytest.fixture(scope="module")
def chain(chains_home: Path) -> Iterator[Any]:
    import chains

    with chains.push(CHAIN_FILE, name=CHAIN) as handle:
        yield handle


@pytest.fixture(scope="module")
def ui(chain: Any, chains_home: Path) -> Iterator[str]:
    """The dashboard's origin, while ``chains ui`` runs."""
    with run_dashboard(CHAIN, {**os.environ, "CHAINS_HOME": str(chains_home)}) as url:
        yield origin_of(url)


def _get(ui: str, path: str) -> Any:
    answer = httpx.get(ui + path, timeout=10)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_the_trace_list_holds_requests_and_each_links_the_batch_that_served_it(chain: Any, ui: str) -> None:
    def call(n: int) -> Any:
        return httpx.post(f"{chain.entrypoint_url}/run_remote", json={"n": n}, timeout=30).json()

    with concurrent.futures.ThreadPoolExecutor(4) as pool:  # at once: they share batches
        answers = list(pool.map(call, range(1, 5)))
    assert answers == [1, 4, 9, 16]

    def listed() -> list[dict[str, Any]]:
        return [t for t in _get(ui, "/api/traces?limit=50") if t["request_id"]]

    wait_until(lambda: len(listed()) >= 4, 30, "the four requests' traces in the store")
    traces = listed()
    # Requests only: no trace of the list is a batch's.
    assert all(not t["root"].endswith(".batch") for t in traces), [t["root"] for t in traces]
    batches: set[str] = set()
    for summary in traces[:4]:
        spans = _get(ui, f"/api/traces/{summary['trace_id']}")
        served = [s for s in spans if "chains.batch.request_id" in s["attributes"]]
        assert served, f"the trace of {summary['request_id']} names no batch"
        batches.add(served[0]["attributes"]["chains.batch.request_id"])
    # The batch is still there, one request away: its own trace, the batch span at its root.
    for batch in batches:
        spans = _get(ui, f"/api/traces/{batch}")
        assert spans[0]["name"] == "Squares.batch" and spans[0]["parent_id"] == ""
        assert spans[0]["attributes"]["chains.batch.size"] >= 1


def test_async_jobs_are_listed_with_their_times_and_result(chain: Any, ui: str) -> None:
    before = _get(ui, "/api/jobs")
    submitted = httpx.post(f"{chain.entrypoint_url}/async_run_remote", json={"model_input": {"n": 7}})
    assert submitted.status_code == 200, submitted.text
    job_id = submitted.json()["request_id"]

    def row() -> dict[str, Any] | None:
        return next((j for j in _get(ui, "/api/jobs")["jobs"] if j["request_id"] == job_id), None)

    wait_until(lambda: (row() or {}).get("status") == "SUCCEEDED", 30, f"job {job_id} listed as done")
    listed = row()
    assert listed is not None and _get(ui, "/api/jobs")["keeps_jobs"] is True
    assert listed["created"] <= listed["finished"] and listed["started"] is None
    assert listed["attempts"] == 1 and listed["streams"] is False
    assert len(_get(ui, "/api/jobs")["jobs"]) == len(before["jobs"]) + 1
    detail = _get(ui, f"/api/jobs/{job_id}")
    assert detail["output"] == 49
    missing = httpx.get(f"{ui}/api/jobs/no-such-job")
    assert missing.status_code == 404 and "no async request 'no-such-job'" in missing.json()["detail"]


def test_a_running_job_shows_when_it_started(chain: Any, ui: str) -> None:
    submitted = httpx.post(
        f"{chain.entrypoint_url}/async_run_remote", json={"model_input": {"n": 2, "pause": 30}}
    )
    job_id = submitted.json()["request_id"]

    def row() -> dict[str, Any]:
        return next(j for j in _get(ui, "/api/jobs")["jobs"] if j["request_id"] == job_id)

    wait_until(lambda: row()["status"] == "IN_PROGRESS", 30, f"job {job_id} running")
    running = row()
    assert running["started"] >= running["created"] and running["finished"] is None
    cancelled = httpx.delete(f"{chain.entrypoint_url}/async_request/{job_id}")
    assert cancelled.status_code == 200
    wait_until(lambda: row()["status"] == "CANCELED", 30, f"job {job_id} cancelled")


def test_the_reason_a_chainlet_last_went_down_is_the_one_status_gives(chain: Any, ui: str) -> None:
    from chains.deploy import find_state

    (squares,) = find_state(CHAIN).replicas("Squares")
    assert squares.pid is not None

    def shown() -> dict[str, Any]:
        return next(p for p in _get(ui, "/api/overview")["processes"] if p["chainlet"] == "Squares")

    assert shown()["reason"] is None
    os.kill(squares.pid, signal.SIGKILL)  # a chainlet process of the chain this module pushed
    wait_until(lambda: shown()["reason"] is not None and shown()["state"] == "ready", 30, "Squares restarted")
    (now,) = find_state(CHAIN).replicas("Squares")
    assert shown()["reason"] == now.reason
    assert "SIGKILL" in now.reason or "-9" in now.reason, now.reason
    assert chain.call(n=3) == 9
