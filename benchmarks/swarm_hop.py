"""One hop through a Docker Swarm beside the local target, in the same run (issue 21).

``benchmarks/chains/one_hop.py`` (``Front`` calls ``Back``) is pushed on the local target and on
the swarm (``--target swarm``), and both are measured in turns, round after round, so that the
machine's drift hits both alike:

- **p50 / p90**: sequential calls to the entrypoint on one keep-alive connection (100 warm-up
  calls, then ``--calls``); each call is one hop, Front -> Back;
- **req/s**: wrk with 16 keep-alive connections for 5 s, against the same entrypoint.

On the swarm the entrypoint runs on the manager (published in host mode, reached here on
127.0.0.1 when the manager is this machine), and ``Back`` is moved to a worker node after the
push (``docker service update --constraint-add node.role==worker``), so that the hop crosses
the overlay network between the nodes; the run records where each ran.

Needs a swarm manager at ``DOCKER_HOST`` on this machine, the other nodes' engines in
``CHAINS_SWARM_NODES`` and a base image (``CHAINS_BASE_IMAGE``), e.g.::

    eval "$(docker/swarm-cluster.sh start /tmp/swarm)"
    CHAINS_BASE_IMAGE=chains-python:bookworm .venv/bin/python -m benchmarks.swarm_hop

(about 2 minutes once the images are built).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import harness, report
from benchmarks.docker_push import HOP_BODY, ONE_HOP, latency_on_host, push, run_cli
from chains.targets.docker_engine import connect

TARGETS = ("local", "swarm")
LOAD = harness.LoadSpec(connections=16, duration_s=5.0)


def _loopback(url: str) -> str:
    """The entrypoint's URL on 127.0.0.1: the swarm publishes it on every address of its node,
    and load is only ever sent to loopback."""
    port = url.rsplit(":", 1)[1]
    return f"http://{harness.HOST}:{port}"


def _back_node(engine: Any, name: str) -> dict[str, str]:
    """Where the swarm runs Front and Back: node hostnames."""
    nodes = {
        n.id: (n.attrs.get("Description") or {}).get("Hostname", n.id) for n in engine.client.nodes.list()
    }
    where = {}
    for service in engine.client.services.list(filters={"label": f"com.docker.stack.namespace={name}"}):
        chainlet = (service.attrs["Spec"].get("Labels") or {}).get("app.kubernetes.io/name", service.name)
        running = [t for t in service.tasks() if t.get("DesiredState") == "running"]
        where[chainlet] = ", ".join(sorted(str(nodes.get(t.get("NodeID"), "?")) for t in running))
    return where


def _move_to_worker(service: str) -> None:
    """Run ``service`` on a worker node: the hop from the manager's Front then crosses nodes."""
    subprocess.run(
        [
            "docker",
            "service",
            "update",
            "--detach=false",
            "--quiet",
            "--constraint-add",
            "node.role==worker",
            service,
        ],
        check=True,
        timeout=300,
        stdout=subprocess.DEVNULL,
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3, help="measurements of each target, in turns")
    parser.add_argument("--calls", type=int, default=1000, help="sequential calls per latency measurement")
    parser.add_argument("--output", type=Path, help="where to write the JSON results")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if not os.environ.get("CHAINS_BASE_IMAGE"):
        sys.exit("name a base image with CHAINS_BASE_IMAGE (docker/build-base-image.sh builds one)")
    started = datetime.datetime.now(datetime.UTC)
    env_info = harness.environment(("uvicorn", "pydantic", "httpx", "docker"))
    engine = connect()
    env_info["engine"] = engine.client.version().get("Version")
    env_info["swarm_nodes"] = len(engine.client.nodes.list())
    busy = harness.machine_busy()
    if busy > 0.2:
        harness.log_stderr(f"warning: other processes are using {busy:.2f} cores; expect noisier runs")
    body = json.dumps(HOP_BODY).encode()
    runs: dict[str, list[dict[str, float]]] = {t: [] for t in TARGETS}
    placement: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="chains-bench-swarm-") as tmp:
        env = {**os.environ, "CHAINS_HOME": str(Path(tmp) / "home")}
        env.setdefault("CHAINS_CACHE_DIR", str(Path(tmp) / "cache"))
        urls: dict[str, str] = {}
        try:
            for target in TARGETS:
                name = f"bench-hop-{target}"
                _, pushed, _ = push(ONE_HOP, env, "--target", target, "--name", name, "--timeout", "300")
                urls[target] = _loopback(pushed["entrypoint_url"])
            _move_to_worker("bench-hop-swarm_bench-hop-swarm-back")
            placement = _back_node(engine, "bench-hop-swarm")
            harness.log_stderr(f"on the swarm: {placement}")
            for n in range(args.rounds):
                for target in TARGETS:
                    latency = latency_on_host(urls[target], {}, 100, args.calls)
                    load = harness.run_wrk(f"{urls[target]}/run_remote", body, LOAD)
                    if load.errors:
                        raise RuntimeError(f"{target}: {load.errors} failed calls under load")
                    runs[target].append(
                        {"p50_ms": latency["p50"], "p90_ms": latency["p90"], "rps": load.requests_per_s}
                    )
                    harness.log_stderr(
                        f"round {n + 1}/{args.rounds} {target}: p50 {latency['p50']:.2f} ms, "
                        f"p90 {latency['p90']:.2f} ms, {load.requests_per_s:.0f} req/s"
                    )
        finally:
            for target in urls:
                run_cli(["stop", f"bench-hop-{target}"], env)
    summary = {
        target: {key: statistics.median(r[key] for r in runs[target]) for key in ("p50_ms", "p90_ms", "rps")}
        for target in TARGETS
    }
    summary["swarm_over_local"] = {
        "p50": summary["swarm"]["p50_ms"] / summary["local"]["p50_ms"],
        "rps": summary["swarm"]["rps"] / summary["local"]["rps"],
    }
    for target in TARGETS:
        figures = summary[target]
        print(
            f"{target:<6} one hop p50 {figures['p50_ms']:.2f} ms (p90 {figures['p90_ms']:.2f}), "
            f"{figures['rps']:.0f} req/s with {LOAD.connections} connections"
        )
    ratio = summary["swarm_over_local"]
    print(f"swarm / local: p50 x{ratio['p50']:.2f}, req/s x{ratio['rps']:.2f}; placement {placement}")
    output = {
        "settings": {"rounds": args.rounds, "calls": args.calls, "connections": LOAD.connections},
        "placement": placement,
        "summary": summary,
        "runs": runs,
    }
    report.write_results("swarm_hop", output, args.output, started=started, environment=env_info)
    return 0


if __name__ == "__main__":
    sys.exit(main())
