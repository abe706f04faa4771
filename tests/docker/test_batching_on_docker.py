"""A batched chainlet on a real engine: callers of the entrypoint, each with one input, are
served in shared batches by the dependency's container (tests/integration has the rest)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.docker.conftest import Cli, remove_chain
from tests.helpers import write_chain

pytestmark = pytest.mark.docker

SOURCE = """
import time

import pydantic

import chains


class Answer(pydantic.BaseModel):
    n: int
    square: int
    batch: int


class Model(chains.ChainletBase):
    remote_config = chains.RemoteConfig(compute=chains.Compute(concurrency=1))

    @chains.batched(max_batch_size=8, max_wait_ms=50)
    def run_remote(self, numbers: list[int]) -> list[Answer]:
        time.sleep(0.05)  # one model call, whatever the batch: callers gain by sharing it
        return [Answer(n=n, square=n * n, batch=len(numbers)) for n in numbers]


@chains.mark_entrypoint("dk-batching")
class Entry(chains.ChainletBase):
    def __init__(self, model: Model = chains.depends(Model)) -> None:
        self._model = model

    async def run_remote(self, n: int) -> Answer:
        return await self._model.run_remote(n)
"""

CALLERS = 16


def test_callers_of_a_batched_dependency_share_its_batches(engine: Any, cli: Cli, tmp_path: Path) -> None:
    remove_chain(engine, "dk-batching")
    file = write_chain(tmp_path / "batching", SOURCE)
    try:
        url = cli.push(str(file))["entrypoint_url"] + "/run_remote"

        def call(n: int) -> dict[str, int]:
            answer = httpx.post(url, json={"n": n}, timeout=60)
            assert answer.status_code == 200, answer.text
            return dict(answer.json())

        with ThreadPoolExecutor(CALLERS) as pool:
            answers = list(pool.map(call, range(CALLERS)))
        # Every caller got its own answer, and the model ran fewer times than it was called.
        assert [(a["n"], a["square"]) for a in answers] == [(n, n * n) for n in range(CALLERS)]
        assert max(a["batch"] for a in answers) > 1, answers
        (model,) = engine.containers({"chains.chain": "dk-batching", "chains.chainlet": "Model"})
        metrics = model.exec_run(
            [
                "python",
                "-c",
                "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8000/metrics').read().decode())",
            ]
        )
        assert metrics.exit_code == 0, metrics.output
        text = metrics.output.decode()
        assert "chains_batch_size_count" in text and "chains_batch_size_sum" in text, text
        served = next(line for line in text.splitlines() if line.startswith("chains_batch_size_sum"))
        runs = next(line for line in text.splitlines() if line.startswith("chains_batch_size_count"))
        assert float(served.rsplit(" ", 1)[1]) == CALLERS
        assert float(runs.rsplit(" ", 1)[1]) < CALLERS
    finally:
        cli.run("stop", "dk-batching", check=False)
        remove_chain(engine, "dk-batching")
