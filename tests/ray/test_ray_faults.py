"""A node of the Ray cluster stopped under load: how many calls fail, and how long Serve
takes to restore every chainlet's replica count."""

from __future__ import annotations

import asyncio
import collections
import time
from pathlib import Path

import pytest

from chains.loader import load_chain
from chains.stubs import StubBase, StubOptions
from chains.targets.ray import ReplicaInfo, replicas
from tests.helpers import await_until
from tests.ray.cluster import HEAD_IP, WORKER_IP, RayCluster
from tests.ray.conftest import SAMPLES, Cli, record
from tests.ray.test_ray_target import _record

pytestmark = pytest.mark.ray

RELAY = SAMPLES / "relay.py"
CALLERS = 16
ROUND_CALLS = 2 * 16  # calls before the node is stopped, and again once the replicas are back
ROUND_LIMIT_SEC = 60.0
RESTORE_LIMIT_SEC = 120.0
CALL_TIMEOUT_SEC = 60.0


def _nodes_by_chainlet(found: list[ReplicaInfo]) -> dict[str, set[str]]:
    nodes: dict[str, set[str]] = collections.defaultdict(set)
    for replica in found:
        if replica.state == "RUNNING":
            nodes[replica.chainlet].add(replica.node_ip)
    return nodes


def test_stopping_a_node_under_16_callers_fails_no_call_and_serve_restores_the_replicas(
    cli: Cli, ray_cluster: RayCluster, tmp_path: Path
) -> None:
    cli.env["RELAY_EVERY_CHAINLET_TWICE"] = "1"
    cli.env["CHAINS_SECRET_relay_signature"] = "from the environment"
    pushed = cli.push(str(RELAY))
    info = _record(cli.home, "ray-relay")
    dashboard, apps = str(info["dashboard_url"]), dict(info["apps"])  # type: ignore[call-overload]
    before = replicas(dashboard, apps)
    placed = _nodes_by_chainlet(before)
    # Every chainlet has a replica on each node, so the worker's loss leaves each one served.
    assert placed == {name: {HEAD_IP, WORKER_IP} for name in ("Front", "Middle", "Back")}, before

    endpoint = load_chain(RELAY).entrypoint.endpoint
    client_cls = type("FrontClient", (StubBase,), {"endpoint": endpoint})
    expected = ["[NODE]", "[DOWN]", "[UNDER]", "[LOAD]", " (4 words) -- from the environment"]
    durations: list[float] = []
    failures: list[str] = []
    done = asyncio.Event()

    async def caller() -> None:
        stub = client_cls(
            str(pushed["entrypoint_url"]),
            name="Front",
            options=StubOptions(retries=3, timeout_sec=CALL_TIMEOUT_SEC),
            ssl_context=ray_cluster.ssl_context(),
        )
        try:
            while not done.is_set():
                started = time.monotonic()
                try:
                    items = [item async for item in stub.stream_remote(text="node down under load")]
                except Exception as exc:
                    failures.append(f"{type(exc).__name__}: {exc}"[:300])
                else:
                    if items != expected:
                        failures.append(f"wrong answer: {items!r}")
                durations.append(time.monotonic() - started)
        finally:
            await stub.aclose()

    def counts() -> dict[str, int]:
        # Running replicas on the head only: for a few seconds after the stop, Serve still
        # reports the worker's replicas as running, until Ray tells it their node is gone.
        found = replicas(dashboard, apps)
        return collections.Counter(r.chainlet for r in found if r.state == "RUNNING" and r.node_ip == HEAD_IP)

    async def scenario() -> tuple[float, float, dict[str, set[str]]]:
        callers = [asyncio.create_task(caller()) for _ in range(CALLERS)]
        try:
            await await_until(lambda: len(durations) >= ROUND_CALLS, ROUND_LIMIT_SEC, "the load under way")
            stopped_at = time.monotonic()
            await asyncio.to_thread(ray_cluster.stop_node, "worker")
            stop_took = time.monotonic() - stopped_at
            deadline = stopped_at + RESTORE_LIMIT_SEC
            while time.monotonic() < deadline:
                running = await asyncio.to_thread(counts)
                if all(running.get(name, 0) >= 2 for name in ("Front", "Middle", "Back")):
                    break
                await asyncio.sleep(0.5)
            restored = time.monotonic() - stopped_at
            after = _nodes_by_chainlet(await asyncio.to_thread(replicas, dashboard, apps))
            floor = len(durations) + ROUND_CALLS
            await await_until(
                lambda: len(durations) >= floor, ROUND_LIMIT_SEC, "calls once the replicas are back"
            )
            return restored, stop_took, after
        finally:
            done.set()
            await asyncio.wait_for(asyncio.gather(*callers), CALL_TIMEOUT_SEC + 10)

    try:
        restored, stop_took, after = asyncio.run(scenario())
    finally:
        if not ray_cluster.nodes["worker"].pid:
            ray_cluster.start_worker()
    ordered = sorted(durations)
    record(
        "ray_node_stopped_under_load",
        callers=CALLERS,
        calls=len(durations),
        failed=len(failures),
        failures=failures[:10],
        node_stop_sec=round(stop_took, 2),
        replicas_restored_sec=round(restored, 2),
        p50_sec=round(ordered[len(ordered) // 2], 4),
        slowest_sec=round(ordered[-1], 3),
        placed_before={k: sorted(v) for k, v in placed.items()},
        placed_after={k: sorted(v) for k, v in after.items()},
    )
    assert restored < RESTORE_LIMIT_SEC, f"Serve did not restore the replicas within {RESTORE_LIMIT_SEC}s"
    assert after == {name: {HEAD_IP} for name in ("Front", "Middle", "Back")}
    assert len(durations) > CALLERS
    assert not failures, f"{len(failures)} of {len(durations)} calls failed: {failures[:5]}"
