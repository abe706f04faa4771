"""Node failure on a real two-node swarm: node 2's dockerd is stopped, by its PID, under 16
concurrent callers. Every chainlet but the entrypoint has a replica on each node, so one replica
of each survives; the callers' stubs retry. Counted: failed calls (the goal is none), and the
time the swarm takes to run the replica count again (on node 1 alone)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import write_chain
from tests.swarm.conftest import Cli, Swarm, remove_stack, service_tasks

CALLERS = 16
MAX_SECONDS = 150.0  # the callers stop by then whatever happens
AFTER_RESTORED_SEC = 3.0  # and keep calling this long once the replicas are back

FAULT = '''
    """Entry -> Mid (2 replicas, retried) -> Leaf (2 replicas, retried)."""

    import asyncio

    import chains


    class Leaf(chains.ChainletBase):
        remote_config = chains.RemoteConfig(compute=chains.Compute(replicas=2, cpu_count=0.5, memory="300Mi"))

        async def run_remote(self, n: int) -> int:
            await asyncio.sleep(0.02)
            return n + 1


    class Mid(chains.ChainletBase):
        remote_config = chains.RemoteConfig(compute=chains.Compute(replicas=2, cpu_count=0.5, memory="300Mi"))

        def __init__(self, leaf: Leaf = chains.depends(Leaf, retries=4, timeout_sec=10)) -> None:
            self._leaf = leaf

        async def run_remote(self, n: int) -> int:
            return await self._leaf.run_remote(n) * 2


    @chains.mark_entrypoint("sw-fault")
    class Entry(chains.ChainletBase):
        def __init__(self, mid: Mid = chains.depends(Mid, retries=4, timeout_sec=20)) -> None:
            self._mid = mid

        async def run_remote(self, n: int) -> int:
            return await self._mid.run_remote(n)
'''


@pytest.fixture
def fault_chain(swarm: Swarm, tmp_path: Path, cache_dir: Path) -> Iterator[tuple[Cli, str]]:
    remove_stack(swarm, "sw-fault")
    cli = Cli(swarm, tmp_path / "home", cache_dir)
    pushed = cli.push(str(write_chain(tmp_path / "chain", FAULT)), "--timeout", "180")
    try:
        yield cli, pushed["entrypoint_url"]
    finally:
        if swarm.ready_nodes() < 2:
            swarm.start_node2()
        cli.run("stop", "sw-fault", check=False)
        remove_stack(swarm, "sw-fault")


def _running_on(swarm: Swarm, service: str) -> list[str]:
    return sorted(t["NodeID"] for t in service_tasks(swarm, service) if t["State"] == "running")


def test_stopping_node_2s_dockerd_under_load(
    swarm: Swarm, fault_chain: tuple[Cli, str], record_property: Any
) -> None:
    _, url = fault_chain
    nodes = swarm.node_ids()
    node1 = next(i for i, host in nodes.items() if host == swarm.node1)
    services = ("sw-fault_sw-fault-mid", "sw-fault_sw-fault-leaf")
    for service in services:
        assert set(_running_on(swarm, service)) == set(nodes), service  # one replica per node

    failures: list[str] = []
    calls = [0]
    lock = threading.Lock()
    stop = threading.Event()

    def caller(index: int) -> None:
        with httpx.Client(timeout=60) as client:
            n = 0
            while not stop.is_set():
                n += 1
                try:
                    answer = client.post(f"{url}/run_remote", json={"n": n})
                    ok = answer.status_code == 200 and answer.json() == (n + 1) * 2
                    problem = "" if ok else f"{answer.status_code} {answer.text[:300]}"
                except httpx.HTTPError as exc:
                    problem = f"{type(exc).__name__}: {exc}"
                with lock:
                    calls[0] += 1
                    if problem:
                        failures.append(problem)

    threads = [threading.Thread(target=caller, args=(i,), daemon=True) for i in range(CALLERS)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    time.sleep(2.0)  # the callers in full swing
    stopped_at = time.monotonic()
    swarm.stop_node2()
    restored_at = None
    while time.monotonic() - started < MAX_SECONDS:
        if all(_running_on(swarm, s) == [node1, node1] for s in services):
            restored_at = time.monotonic()
            break
        time.sleep(0.5)
    if restored_at is not None:
        time.sleep(AFTER_RESTORED_SEC)
    stop.set()
    for thread in threads:
        thread.join(90)
    assert not any(t.is_alive() for t in threads)
    figures = {
        "callers": CALLERS,
        "calls": calls[0],
        "failed": len(failures),
        "restored_after_s": None if restored_at is None else round(restored_at - stopped_at, 1),
        "failures": sorted(set(failures))[:5],
    }
    record_property("node_stop", json.dumps(figures))
    print(f"node-2 stop under load: {json.dumps(figures)}")
    assert restored_at is not None, (
        f"the swarm did not run 2 replicas again within {MAX_SECONDS:.0f}s: {figures}"
    )
    assert calls[0] > CALLERS * 10, figures
    assert failures == [], figures
