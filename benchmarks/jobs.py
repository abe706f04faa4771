"""Async calls (docs/jobs.md): how soon a submitted job starts, how many jobs a second go
through the queue, and what keeping a stream's events resumable costs.

Each figure is measured against a baseline from the same run, on the same pushed chain:

- **submit to start**: a job's body stamps the time it started; the figure is that minus the
  time its submission was sent (same clock), median of sequential jobs; the baseline is the
  same for a plain ``POST /run_remote`` call;
- **jobs per second**: N trivial jobs submitted at once, until the last one has SUCCEEDED;
  the baseline is the same N calls through ``POST /run_remote`` with as many at once as the
  entrypoint runs jobs (``CHAINS_JOB_WORKERS``, 2);
- **resumable events**: one stream of M small items submitted as a job and read from its
  ``/events`` as they are stored (every event numbered and kept), against the same stream read
  from ``POST /run_remote`` as SSE (nothing kept); and the same stream from ``POST /run_remote``
  with ``X-Chains-Resumable: 1`` (run as a job at once, answered live from its kept events).

Run from the repository root: ``.venv/bin/python -m benchmarks.jobs`` (about a minute);
``--smoke`` runs each once with small counts and fails on errors only, never on a time.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks import harness, report

CHAIN_FILE = Path(__file__).resolve().parent / "chains" / "jobs.py"


def push(entrypoint: str, name: str) -> str:
    from chains.deploy import push_chain
    from chains.loader import load_chain
    from chains.targets import PushOptions

    chain = load_chain(CHAIN_FILE, entrypoint, name)
    return push_chain(chain, CHAIN_FILE, "local", PushOptions(timeout=60)).entrypoint_url


def wait_done(client: httpx.Client, job: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status: dict[str, Any] = client.get(f"/async_request/{job}").json()
        if status["status"] not in ("QUEUED", "IN_PROGRESS"):
            if status["status"] != "SUCCEEDED":
                raise RuntimeError(f"job {job} ended {status}")
            return status
        time.sleep(0.002)
    raise RuntimeError(f"job {job} did not end within {timeout}s")


def submit_to_start(client: httpx.Client, count: int) -> dict[str, float]:
    jobs, calls = [], []
    for n in range(count):
        sent = time.time()
        job = client.post("/async_run_remote", json={"model_input": {"n": n}}).json()["request_id"]
        wait_done(client, job)
        started = client.get(f"/async_request/{job}/output").json()["started"]
        jobs.append((started - sent) * 1000)
        sent = time.time()
        answer = client.post("/run_remote", json={"n": n}).json()
        calls.append((answer["started"] - sent) * 1000)
    job_ms, call_ms = statistics.median(jobs), statistics.median(calls)
    return {"job_p50_ms": job_ms, "call_p50_ms": call_ms, "ratio": job_ms / call_ms}


async def jobs_per_second(url: str, count: int, concurrency: int) -> dict[str, float]:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        started = time.perf_counter()
        submitted = await asyncio.gather(
            *(client.post("/async_run_remote", json={"model_input": {"n": n}}) for n in range(count))
        )
        ids = [answer.json()["request_id"] for answer in submitted]
        left = set(ids)
        while left:
            listed = (
                await client.get("/async_request", params={"limit": count, "status": "SUCCEEDED"})
            ).json()
            left -= {job["request_id"] for job in listed["requests"]}
            await asyncio.sleep(0.01)
        jobs_s = count / (time.perf_counter() - started)
        failed = (await client.get("/async_request", params={"status": "FAILED"})).json()["requests"]
        if failed:
            raise RuntimeError(f"{len(failed)} jobs failed: {failed[0]}")

        limit = asyncio.Semaphore(concurrency)

        async def call(n: int) -> None:
            async with limit:
                (await client.post("/run_remote", json={"n": n})).raise_for_status()

        started = time.perf_counter()
        await asyncio.gather(*(call(n) for n in range(count)))
        calls_s = count / (time.perf_counter() - started)
    return {"jobs_per_s": jobs_s, "calls_per_s": calls_s, "ratio": jobs_s / calls_s}


def _count_items(lines: Any) -> int:
    items = 0
    for line in lines:
        if line.startswith("data: ") and line != "data: ":
            items += 1
    return items


def _read_stream(client: httpx.Client, method: str, path: str, **request: Any) -> tuple[int, float]:
    """The items of one streamed answer, and the seconds from the request to its end."""
    started = time.perf_counter()
    with client.stream(method, path, **request) as answer:
        items = _count_items(answer.iter_lines())
    return items, time.perf_counter() - started


def resumable_events(url: str, count: int) -> dict[str, float]:
    body = {"count": count}
    with httpx.Client(base_url=url, timeout=120) as client:
        plain, plain_s = _read_stream(
            client, "POST", "/run_remote", json=body, headers={"accept": "text/event-stream"}
        )
        # The job's time counts from its submission, as the plain call's from its request.
        started = time.perf_counter()
        job = client.post("/async_run_remote", json={"model_input": body}).json()["request_id"]
        kept, _ = _read_stream(client, "GET", f"/async_request/{job}/events")
        kept_s = time.perf_counter() - started
        resumable, resumable_s = _read_stream(
            client, "POST", "/run_remote", json=body, headers={"x-chains-resumable": "1"}
        )
    if plain != count or kept != count or resumable != count:
        raise RuntimeError(f"items lost: {plain}, {kept} and {resumable} of {count}")
    return {
        "plain_items_per_s": count / plain_s,
        "resumable_items_per_s": count / kept_s,
        "ratio": plain_s / kept_s,
        "resumable_run_remote_items_per_s": count / resumable_s,
        "run_remote_ratio": plain_s / resumable_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--smoke", action="store_true", help="small counts, once: errors fail, times never do"
    )
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    sequential, burst, items = (5, 20, 200) if args.smoke else (50, 500, 20_000)
    started = datetime.datetime.now(datetime.UTC)
    environment = harness.environment(("pydantic",))  # its load average is the one at the start
    from chains.deploy import stop_chain

    home = tempfile.mkdtemp(prefix="bench-jobs-")
    os.environ["CHAINS_HOME"] = home
    try:
        unary = push("Stamp", "bench-jobs")
        stream = push("Items", "bench-job-stream")
        with httpx.Client(base_url=unary, timeout=60) as client:
            latency = submit_to_start(client, sequential)
        throughput = asyncio.run(jobs_per_second(unary, burst, concurrency=2))
        events = resumable_events(stream, items)
    finally:
        stop_chain("bench-jobs", grace=5)
        stop_chain("bench-job-stream", grace=5)
    print(f"submit to start: job {latency['job_p50_ms']:.2f} ms, call {latency['call_p50_ms']:.2f} ms (p50)")
    print(
        f"through the queue: {throughput['jobs_per_s']:.0f} jobs/s, {throughput['calls_per_s']:.0f} calls/s"
    )
    print(
        f"a stream of {items} items: {events['resumable_items_per_s']:.0f}/s kept and numbered, "
        f"{events['plain_items_per_s']:.0f}/s plain ({events['ratio']:.2f}x); a resumable /run_remote "
        f"{events['resumable_run_remote_items_per_s']:.0f}/s ({events['run_remote_ratio']:.2f}x)"
    )
    if not args.smoke:
        report.write_results(
            "jobs",
            {
                "submit_to_start": latency,
                "throughput": throughput,
                "resumable_events": events,
                "items": items,
            },
            args.output,
            started=started,
            environment=environment,
        )


if __name__ == "__main__":
    main()
