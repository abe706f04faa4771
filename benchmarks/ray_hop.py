"""One hop through Ray Serve beside the local target's, in the same run (issue 21).

``benchmarks/chains/one_hop.py`` (``Front`` calls ``Back``) is pushed on the local target and on
the ray target (a two-node cluster on this machine, ``tests/ray/cluster.py``, started for the
run unless ``RAY_ADDRESS`` names one). On each, interleaved over rounds:

- sequential calls on one keep-alive connection, p50: to the entrypoint, and to ``Back``
  directly with the chain's token; the hop is the entrypoint minus ``Back`` (on Ray both go
  through Serve's proxy, and the hop is Front -> proxy -> Back);
- closed-loop load from 16 connections for a few seconds: requests per second and p50.

The load generator is Python (aiohttp) for both targets: wrk is kept to 127.0.0.1 by the harness,
and Ray's proxy listens on 127.0.0.2. Run from the repository root, with ``chains-sdk[ray]``
installed: ``.venv/bin/python -m benchmarks.ray_hop`` (about 4 minutes, most of it the cluster
and the pushes).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import importlib.metadata
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp

from benchmarks import harness, report
from benchmarks.chainlets import CHAINS_DIR

ONE_HOP = CHAINS_DIR / "one_hop.py"
BODY = json.dumps({"prompt": "hello", "max_tokens": 16}).encode()
TARGETS = ("local", "ray")


async def _sequential(url: str, headers: dict[str, str], warmup: int, calls: int) -> float:
    """p50 in milliseconds of ``calls`` sequential calls on one connection."""
    took = []
    connector = aiohttp.TCPConnector(limit=1)
    async with aiohttp.ClientSession(connector=connector) as session:
        for n in range(warmup + calls):
            start = time.perf_counter()
            async with session.post(url + "/run_remote", data=BODY, headers=headers) as response:
                await response.read()
                if response.status != 200:
                    raise RuntimeError(f"HTTP {response.status} from {url}")
            if n >= warmup:
                took.append((time.perf_counter() - start) * 1000)
    return statistics.median(took)


async def _load(url: str, connections: int, duration_s: float) -> dict[str, float]:
    """Closed-loop load: requests per second, p50 in milliseconds and errors."""
    took: list[float] = []
    errors = 0
    deadline = time.perf_counter() + duration_s
    connector = aiohttp.TCPConnector(limit=connections)
    headers = {"content-type": "application/json"}
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            nonlocal errors
            while time.perf_counter() < deadline:
                start = time.perf_counter()
                async with session.post(url + "/run_remote", data=BODY, headers=headers) as response:
                    await response.read()
                    if response.status != 200:
                        errors += 1
                took.append((time.perf_counter() - start) * 1000)

        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(connections)))
        elapsed = time.perf_counter() - began
    return {"requests_per_s": len(took) / elapsed, "p50_ms": statistics.median(took), "errors": errors}


def _cli(args: Sequence[str], env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "chains", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"chains {' '.join(args)} failed:\n{done.stderr}")
    return done.stdout


def _token(home: Path, name: str) -> str:
    deployment_id = json.loads((home / name / "state.json").read_text())["deployment"]
    deployment = json.loads((home / name / "deployments" / deployment_id / "deployment.json").read_text())
    return str(deployment["chainlets"][0]["env"]["CHAINS_INTERNAL_TOKEN"])


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=300, help="sequential calls per measurement")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds of load per measurement")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from tests.ray.cluster import RayCluster

    started = datetime.datetime.now(datetime.UTC)
    workdir = Path(tempfile.mkdtemp(prefix="chains-ray-hop-"))
    cluster: RayCluster | None = None
    address = os.environ.get("RAY_ADDRESS")
    if not address:
        harness.log_stderr("starting a two-node Ray cluster (head 127.0.0.2, worker 127.0.0.3)")
        cluster = RayCluster(workdir / "cluster")
        cluster.start()
        address = cluster.address
    home = workdir / "home"
    env = {**os.environ, "CHAINS_HOME": str(home), "RAY_ADDRESS": address}
    urls: dict[str, dict[str, str]] = {}
    try:
        for target in TARGETS:
            name = f"bench-hop-{target}"
            pushed = json.loads(
                _cli(["push", str(ONE_HOP), "--target", target, "--name", name, "--json"], env).splitlines()[
                    -1
                ]
            )
            urls[target] = {
                "entry": pushed["entrypoint_url"],
                "back": pushed["chainlets"]["Back"][0],
                "token": _token(home, name),
            }
        figures: dict[str, dict[str, list[float]]] = {t: {} for t in TARGETS}
        for round_number in range(args.rounds):
            for target in TARGETS:
                where = urls[target]
                plain = {"content-type": "application/json"}
                auth = {**plain, "authorization": f"Bearer {where['token']}"}
                entry = asyncio.run(_sequential(where["entry"], plain, 30, args.calls))
                back = asyncio.run(_sequential(where["back"], auth, 30, args.calls))
                load = asyncio.run(_load(where["entry"], args.connections, args.duration))
                if load["errors"]:
                    raise RuntimeError(f"{target}: {load['errors']} calls failed under load")
                row = figures[target]
                for key, value in (
                    ("entry_p50_ms", entry),
                    ("back_p50_ms", back),
                    ("hop_p50_ms", entry - back),
                    ("load_requests_per_s", load["requests_per_s"]),
                    ("load_p50_ms", load["p50_ms"]),
                ):
                    row.setdefault(key, []).append(value)
                harness.log_stderr(
                    f"round {round_number + 1} {target}: entrypoint p50 {entry:.2f} ms, Back {back:.2f} ms, "
                    f"hop {entry - back:.2f} ms; {args.connections} connections: "
                    f"{load['requests_per_s']:.0f} req/s, p50 {load['p50_ms']:.1f} ms"
                )
    finally:
        for target in urls:
            _cli(["stop", f"bench-hop-{target}"], env)
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    medians = {t: {k: statistics.median(v) for k, v in rows.items()} for t, rows in figures.items()}
    result: dict[str, Any] = {
        "rounds": figures,
        "medians": medians,
        "ray_over_local": {
            "hop_p50": medians["ray"]["hop_p50_ms"] / medians["local"]["hop_p50_ms"],
            "load_requests_per_s": medians["ray"]["load_requests_per_s"]
            / medians["local"]["load_requests_per_s"],
        },
    }
    environment = {
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "packages": {name: importlib.metadata.version(name) for name in ("ray", "uvicorn", "aiohttp")},
        "connections": args.connections,
        "calls": args.calls,
        "rounds_run": args.rounds,
    }
    report.write_results("ray_hop", result, started=started, environment=environment)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for target in TARGETS:
            m = medians[target]
            print(
                f"{target:5}  entrypoint p50 {m['entry_p50_ms']:6.2f} ms  Back {m['back_p50_ms']:6.2f} ms  "
                f"hop {m['hop_p50_ms']:6.2f} ms  {m['load_requests_per_s']:6.0f} req/s "
                f"(p50 {m['load_p50_ms']:.1f} ms at {args.connections} connections)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
