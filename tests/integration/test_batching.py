"""Adaptive batching against real chainlet processes on 127.0.0.1.

The fake model costs 5 ms + 0.2 ms per item (``time.sleep`` in a sync body, which runs in a
worker thread and releases the GIL). It logs each batch it runs, so a test can tell which
calls were computed. Batches whose composition a test asserts are made deterministic by a
wait far longer than the test (a batch then goes only when full), never by timing.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import httpx
import pytest

from tests.helpers import Cli, ServerProcess, generate_chain, running, wait_until, write_chain

CHAIN = '''
import asyncio
import json
import os
import time
from typing import AsyncIterator

import pydantic

import chains


class Job(pydantic.BaseModel):
    n: int


class Answer(pydantic.BaseModel):
    n: int
    square: int
    batch: int


def _log(jobs: list[Job]) -> None:
    path = os.environ.get("MODEL_LOG")
    if path:
        with open(path, "a") as log:
            log.write(json.dumps([j.n for j in jobs]) + "\\n")


def _wait_for_gate() -> None:
    gate = os.environ.get("MODEL_GATE", "")
    deadline = time.monotonic() + 60
    while gate and not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.01)


class Model(chains.ChainletBase):
    """A fake model: -1 breaks the whole batch, -2 makes the body return one output too few,
    -3 fails only its own call, -4 holds the batch until the file MODEL_GATE names exists."""

    remote_config = chains.RemoteConfig(compute=chains.Compute(concurrency=1))

    @chains.batched(
        max_batch_size=int(os.environ.get("MODEL_BATCH", "8")),
        max_wait_ms=float(os.environ.get("MODEL_WAIT_MS", "10")),
    )
    def run_remote(self, jobs: list[Job]) -> list[Answer | ValueError]:
        _log(jobs)
        numbers = [j.n for j in jobs]
        time.sleep(0.005 + 0.0002 * len(jobs))
        if -4 in numbers:
            _wait_for_gate()
        if -1 in numbers:
            raise RuntimeError(f"the model broke on a batch of {len(jobs)}")
        answers: list[Answer | ValueError] = [
            ValueError(f"cannot answer {j.n}")
            if j.n == -3
            else Answer(n=j.n, square=j.n * j.n, batch=len(jobs))
            for j in jobs
        ]
        return answers[:-1] if -2 in numbers else answers


class Steps(chains.ChainletBase):
    """Streams a batch: three steps, each one output per prompt; "bad" fails at step 1."""

    @chains.batched(max_batch_size=4, max_wait_ms=60000)
    async def run_remote(self, prompts: list[str]) -> AsyncIterator[list[str | ValueError]]:
        for step in range(3):
            await asyncio.sleep(0.005 + 0.0002 * len(prompts))
            yield [
                ValueError(f"no step {step} for {p}")
                if p == "bad" and step == 1
                else f"{p}:{step}:{len(prompts)} "
                for p in prompts
            ]


class Relay(chains.ChainletBase):
    def __init__(self, steps: Steps = chains.depends(Steps)) -> None:
        self._steps = steps

    async def run_remote(self, prompt: str) -> AsyncIterator[str]:
        async for item in self._steps.run_remote(prompt):
            yield item.upper()


@chains.mark_entrypoint
class Entry(chains.ChainletBase):
    def __init__(self, model: Model = chains.depends(Model)) -> None:
        self._model = model

    async def run_remote(self, n: int) -> int:
        answer = await self._model.run_remote(Job(n=n))
        return answer.square
'''


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("batching")
    file = write_chain(folder / "src", CHAIN)
    return {
        **generate_chain(file, folder / "out"),
        **generate_chain(file, folder / "relay", entrypoint="Relay"),
    }


def model_server(generated: dict[str, Path], log: Path, **env: str) -> ServerProcess:
    return ServerProcess(generated["Model"], env={"MODEL_LOG": str(log), **env})


@pytest.fixture(scope="module")
def full_only(
    generated: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """Batches of exactly 8: the wait (60 s) is longer than any test here."""
    log = tmp_path_factory.mktemp("full") / "batches.jsonl"
    with running(model_server(generated, log, MODEL_WAIT_MS="60000")) as (server,):
        yield server


@pytest.fixture()
def small_queue(generated: dict[str, Path], tmp_path: Path) -> Iterator[tuple[ServerProcess, Path, Path]]:
    """A model server whose queue holds 3 calls; a -4 batch holds the model until the test
    creates the gate file (the third item), so what queues meanwhile does not race a timer."""
    log, gate = tmp_path / "batches.jsonl", tmp_path / "gate"
    with running(model_server(generated, log, CHAINS_MAX_QUEUE="3", MODEL_GATE=str(gate))) as (server,):
        try:
            yield server, log, gate
        finally:
            gate.touch()


def post(server: ServerProcess, n: int, timeout: float = 30, **headers: str) -> httpx.Response:
    return httpx.post(
        server.url + "/run_remote",
        content=json.dumps({"jobs": {"n": n}}),
        headers={**server.headers, **headers},
        timeout=timeout,
    )


def post_all(server: ServerProcess, numbers: list[int]) -> list[httpx.Response]:
    with concurrent.futures.ThreadPoolExecutor(len(numbers)) as pool:
        return list(pool.map(lambda n: post(server, n), numbers))


def batches(log: Path) -> list[list[int]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def metric(server: ServerProcess, name: str) -> float:
    text = httpx.get(server.url + "/metrics", timeout=5).text
    found = re.search(rf"^{name}{{[^}}]*}} (\S+)$", text, re.MULTILINE)
    assert found is not None, f"{name} not in /metrics:\n{text}"
    return float(found.group(1))


def test_a_full_batch_goes_at_once_and_each_caller_gets_its_own_answer(full_only: ServerProcess) -> None:
    numbers = [3, 14, 15, 92, 65, 35, 89, 79]
    responses = post_all(full_only, numbers)
    for n, response in zip(numbers, responses, strict=True):
        assert response.status_code == 200, response.text
        assert response.json() == {"n": n, "square": n * n, "batch": 8}


def test_a_body_exception_fails_every_call_of_its_batch_with_the_remote_traceback(
    full_only: ServerProcess,
) -> None:
    responses = post_all(full_only, [1, 2, 3, -1, 5, 6, 7, 8])
    for response in responses:
        assert response.status_code == 500
        error = response.json()["error"]
        assert error["exc_type"] == "RuntimeError"
        assert error["message"] == "the model broke on a batch of 8"
        assert "raise RuntimeError" in error["traceback"]


def test_a_returned_exception_fails_only_its_own_call(full_only: ServerProcess) -> None:
    numbers = [1, 2, -3, 4, 5, 6, 7, 8]
    responses = post_all(full_only, numbers)
    for n, response in zip(numbers, responses, strict=True):
        if n == -3:
            assert response.status_code == 500
            assert response.json()["error"]["exc_type"] == "ValueError"
            assert response.json()["error"]["message"] == "cannot answer -3"
        else:
            assert response.status_code == 200 and response.json()["square"] == n * n


def test_a_wrong_number_of_outputs_fails_the_batch_naming_the_chainlet(full_only: ServerProcess) -> None:
    for response in post_all(full_only, [1, 2, 3, 4, -2, 6, 7, 8]):
        assert response.status_code == 500
        message = response.json()["error"]["message"]
        assert message.startswith(
            "chainlet Model: the batched run_remote got 8 inputs and returned 7 outputs"
        )


def test_a_partial_batch_goes_when_its_oldest_call_has_waited(
    generated: dict[str, Path], tmp_path: Path
) -> None:
    log = tmp_path / "batches.jsonl"
    with running(model_server(generated, log, MODEL_WAIT_MS="500")) as (server,):
        started = time.monotonic()
        responses = post_all(server, [1, 2, 3])
        elapsed = time.monotonic() - started
    assert [r.json()["n"] for r in responses] == [1, 2, 3]
    size_of = {n: len(batch) for batch in batches(log) for n in batch}
    assert all(r.json()["batch"] == size_of[r.json()["n"]] for r in responses)
    assert sorted(size_of) == [1, 2, 3]
    assert elapsed >= 0.5  # none of the (partial) batches went before its oldest call waited


def _send_slow(server: ServerProcess, log: Path) -> concurrent.futures.Future[httpx.Response]:
    """Occupy the model (concurrency 1) until the gate opens; return once its batch has started."""
    pool = concurrent.futures.ThreadPoolExecutor(1)
    slow = pool.submit(post, server, -4)
    pool.shutdown(wait=False)
    wait_until(lambda: [-4] in batches(log), 10, "the slow batch started")
    return slow


def test_an_expired_deadline_is_answered_504_and_never_computed(
    small_queue: tuple[ServerProcess, Path, Path],
) -> None:
    server, log, gate = small_queue
    slow = _send_slow(server, log)
    late = post(server, 77, **{"x-chains-timeout": "0.1"})
    assert late.status_code == 504
    assert late.json()["error"]["exc_type"] == "DeadlineExceeded"
    gate.touch()
    assert slow.result(10).status_code == 200
    after = post(server, 78)
    assert after.status_code == 200 and after.json()["square"] == 78 * 78
    assert all(77 not in batch for batch in batches(log))


def test_a_cancelled_callers_call_leaves_the_queue(small_queue: tuple[ServerProcess, Path, Path]) -> None:
    server, log, gate = small_queue
    slow = _send_slow(server, log)
    body = json.dumps({"jobs": {"n": 55}}).encode()
    head = (
        "POST /run_remote HTTP/1.1\r\nhost: 127.0.0.1\r\n"
        f"authorization: {server.headers['authorization']}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as client:
        client.sendall(head.encode() + body)
        wait_until(lambda: metric(server, "chains_batch_queue_length") == 1, 10, "the call queued")
    # The client has gone (its connection closed): its call leaves the queue.
    wait_until(lambda: metric(server, "chains_batch_queue_length") == 0, 10, "the queue emptied")
    gate.touch()
    assert slow.result(10).status_code == 200
    assert post(server, 56).status_code == 200
    assert all(55 not in batch for batch in batches(log))


def test_past_the_queue_bound_calls_get_503_with_retry_after(
    small_queue: tuple[ServerProcess, Path, Path],
) -> None:
    server, log, gate = small_queue
    slow = _send_slow(server, log)
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        queued = [pool.submit(post, server, n) for n in (10, 11, 12)]
        wait_until(lambda: metric(server, "chains_batch_queue_length") == 3, 10, "three calls queued")
        refused = post(server, 13)
        assert refused.status_code == 503
        assert refused.headers["retry-after"] == "1"
        assert "3 calls waiting for a batch" in refused.json()["detail"]
        gate.touch()
        assert [f.result(10).json()["square"] for f in queued] == [100, 121, 144]
    assert slow.result(10).status_code == 200
    # The concurrency limit (1) counts batches: the three queued calls ran as one batch.
    assert sorted(batches(log)[-1]) == [10, 11, 12]
    assert metric(server, "chains_batch_size_count") == 2


def test_64_concurrent_callers_for_10_seconds_lose_nothing(
    generated: dict[str, Path], tmp_path: Path
) -> None:
    log = tmp_path / "batches.jsonl"
    failures: list[str] = []
    answered = [0] * 64

    async def caller(index: int, session: aiohttp.ClientSession, url: str, stop_at: float) -> None:
        n = index * 1_000_000  # each caller's own numbers: an answer given to another shows
        while time.monotonic() < stop_at and not failures and n < (index + 1) * 1_000_000:
            async with session.post(url, data=json.dumps({"jobs": {"n": n}})) as response:
                body = await response.read()
            answer = json.loads(body) if response.status == 200 else {}
            if answer.get("n") != n or answer.get("square") != n * n:
                failures.append(f"{n}: {response.status} {body[:200]!r}")
                return
            answered[index] += 1
            n += 1

    async def load(server: ServerProcess) -> None:
        connector = aiohttp.TCPConnector(limit=64)
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(
            headers=server.headers, connector=connector, timeout=timeout
        ) as session:
            stop_at = time.monotonic() + 10
            url = server.url + "/run_remote"
            await asyncio.wait_for(asyncio.gather(*(caller(i, session, url, stop_at) for i in range(64))), 60)

    with running(model_server(generated, log, MODEL_BATCH="32", MODEL_WAIT_MS="5")) as (server,):
        asyncio.run(load(server))
        served = metric(server, "chains_batch_size_sum")
        runs = metric(server, "chains_batch_size_count")
    assert not failures, failures[:5]
    total = sum(answered)
    computed = [n for batch in batches(log) for n in batch]
    # Every call was computed exactly once, and answered.
    assert len(computed) == len(set(computed)) == total == served
    assert max(len(batch) for batch in batches(log)) > 1
    assert runs < total
    # The figures docs/reliability.md quotes (shown with `pytest -s`).
    print(f"\n64 callers for 10 s: {total} calls, 0 failed, {runs:.0f} batches, mean {total / runs:.1f}")


def test_the_stub_and_openapi_show_the_single_item_form(generated: dict[str, Path]) -> None:
    descriptor = json.loads((generated["Model"] / "chainlet.json").read_text())
    assert descriptor["endpoint"]["batching"] == {"max_batch_size": 8, "max_wait_ms": 10.0}
    text = (generated["Entry"] / "chains_stubs" / "model.py").read_text()
    # The body's `list[Answer | ValueError]` is `Answer` for a caller: errors arrive as errors.
    assert "async def run_remote(self, jobs: Job) -> Answer:" in text
    assert "from chain import Answer, Job\n" in text
    with running(ServerProcess(generated["Model"])) as (server,):
        document = httpx.get(server.url + "/openapi.json", timeout=5).json()
    summary = document["paths"]["/run_remote"]["post"]["summary"]
    assert summary.startswith("async run_remote(jobs: Job) -> Answer (batched: up to 8 calls per run")


def test_a_caller_chainlet_calls_the_batched_one_with_one_input(generated: dict[str, Path]) -> None:
    model = ServerProcess(generated["Model"])
    with running(model):
        entry = ServerProcess(generated["Entry"], entrypoint=True, dependencies={"Model": [model.url]})
        with running(entry), concurrent.futures.ThreadPoolExecutor(8) as pool:
            responses = list(
                pool.map(
                    lambda n: httpx.post(
                        entry.url + "/run_remote", json={"n": n}, headers=entry.headers, timeout=30
                    ),
                    range(8),
                )
            )
    assert [r.json() for r in responses] == [n * n for n in range(8)]


def test_chains_push_serves_the_batched_chain_and_status_shows_its_batching(tmp_path: Path) -> None:
    file = write_chain(tmp_path / "src", CHAIN)
    cli = Cli(tmp_path / "home")
    try:
        pushed = cli.push(str(file), "--name", "batching-test")
        url = str(pushed["entrypoint_url"])
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            squares = list(
                pool.map(lambda n: httpx.post(url + "/run_remote", json={"n": n}, timeout=30), range(8))
            )
        assert [r.json() for r in squares] == [n * n for n in range(8)]
        status = cli.run("status", "batching-test").stdout
    finally:
        cli.run("stop", "batching-test", check=False)
    header, *rows = [line.split() for line in status.splitlines()[1:]]
    assert header[-1] == "BATCHING"
    by_name = {row[0]: " ".join(row[6:]) for row in rows}
    assert by_name["Entry"] == "-"
    assert re.fullmatch(r"queue 0, mean batch \d+\.\d", by_name["Model"]), status


def _stream(url: str, body: dict[str, str], headers: dict[str, str]) -> tuple[str, str]:
    """The text a caller received, and how its stream ended."""
    received = []
    try:
        with httpx.stream("POST", url + "/run_remote", json=body, headers=headers, timeout=30) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/plain")
            for text in response.iter_text():
                received.append(text)
    except httpx.HTTPError as exc:
        return "".join(received), type(exc).__name__
    return "".join(received), "complete"


def test_a_streaming_batch_streams_each_caller_its_own_items(generated: dict[str, Path]) -> None:
    steps = ServerProcess(generated["Steps"])
    with running(steps):
        relay = ServerProcess(generated["Relay"], entrypoint=True, dependencies={"Steps": [steps.url]})
        with running(relay), concurrent.futures.ThreadPoolExecutor(4) as pool:
            direct = list(pool.map(lambda p: _stream(steps.url, {"prompts": p}, steps.headers), "abc*"))
            relayed = list(pool.map(lambda p: _stream(relay.url, {"prompt": p}, {}), ["a", "b", "c", "bad"]))
        document = httpx.get(steps.url + "/openapi.json", timeout=5).json()
    assert direct == [(f"{p}:0:4 {p}:1:4 {p}:2:4 ", "complete") for p in "abc*"]
    for prompt, (text, end) in zip("ABC", relayed, strict=False):
        assert (text, end) == (f"{prompt}:0:4 {prompt}:1:4 {prompt}:2:4 ", "complete")
    # Only the failing caller's stream breaks; a raw text stream has no in-band error, so its
    # transfer is cut after its first item, never ended as if complete.
    bad_text, bad_end = relayed[3]
    assert bad_text == "BAD:0:4 " and bad_end != "complete"
    assert document["paths"]["/run_remote"]["post"]["summary"].startswith(
        "async run_remote(prompts: str) -> stream of str (batched: up to 4 calls per run"
    )
    stub = (generated["Relay"] / "chains_stubs" / "steps.py").read_text()
    assert "def run_remote(self, prompts: str) -> AsyncIterator[str]:" in stub
