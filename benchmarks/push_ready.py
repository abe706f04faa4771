"""Push-to-ready time of a 3-chainlet chain through the ``chains push`` CLI, and each process's memory
(issue 6).

Each repetition runs ``chains push benchmarks/chains/three.py --json`` in a fresh ``CHAINS_HOME`` and
times it from the command's start until it exits, which it does once every chainlet's ``/readyz``
answers 200 (the local target's contract). Then one call goes through the three hops, the resident
memory of every chainlet process and of the supervisor is read from ``/proc/<pid>/status`` (``VmRSS``,
and ``VmHWM``, its peak), and ``chains stop`` is timed too. For a breakdown, ``chains push --dry-run``
(start the CLI, load and check the chain, generate the code, start nothing) is timed as well.

Run from the repository root: ``.venv/bin/python -m benchmarks.push_ready`` (about 30 s).
Targets: push-to-ready at most 3 s (median of the pushes); at most 70 MiB RSS for a chainlet with no
heavy imports (these have none).
"""

from __future__ import annotations

import argparse
import datetime
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from benchmarks import harness, report
from benchmarks.chainlets import CHAINS_DIR

CHAIN_FILE = CHAINS_DIR / "three.py"
CHAIN_NAME = "bench-three"
PUSH_TARGET_S = 3.0
RSS_TARGET_MIB = 70.0


def chains_command() -> list[str]:
    """The ``chains`` console script of this interpreter's environment, as a user runs it."""
    script = Path(sys.executable).with_name("chains")
    return [str(script)] if script.exists() else [sys.executable, "-m", "chains"]


def run_cli(args: Sequence[str], env: dict[str, str], cwd: Path, timeout_s: float) -> tuple[float, str]:
    started = time.perf_counter()
    completed = subprocess.run(
        [*chains_command(), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout_s
    )
    elapsed = time.perf_counter() - started
    if completed.returncode != 0:
        raise RuntimeError(f"chains {' '.join(args)} exited {completed.returncode}:\n{completed.stderr}")
    return elapsed, completed.stdout


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of ``pid`` in KiB, from /proc."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def call(url: str, text: str) -> Any:
    parts = urlsplit(url)
    if parts.hostname != harness.HOST or parts.port is None:
        raise ValueError(f"only {harness.HOST} is called, not {url}")
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        body = json.dumps({"text": text})
        conn.request("POST", "/run_remote", body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        payload = response.read()
        if response.status != 200:
            raise RuntimeError(f"call answered {response.status}: {payload[:300]!r}")
        return json.loads(payload)
    finally:
        conn.close()


def one_push(home: Path, workdir: Path, timeout_s: float) -> dict[str, Any]:
    env = {**os.environ, "CHAINS_HOME": str(home)}
    push_s, out = run_cli(["push", str(CHAIN_FILE), "--json"], env, workdir, timeout_s)
    pushed = json.loads(out)
    answer = call(pushed["entrypoint_url"], "ready")
    if answer != "READY!":
        raise RuntimeError(f"the chain answered {answer!r}")
    state = json.loads((home / CHAIN_NAME / "state.json").read_text())
    processes = {
        p["chainlet"] if p["replica"] == 0 else f"{p['chainlet']}-{p['replica']}": memory_kib(p["pid"])
        for p in state["processes"]
    }
    supervisor = memory_kib(state["local"]["supervisor_pid"]) if state.get("local") else {}
    stop_s, _ = run_cli(["stop", CHAIN_NAME], env, workdir, timeout_s)
    return {"push_s": push_s, "stop_s": stop_s, "memory_kib": processes, "supervisor_kib": supervisor}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--pushes", type=int, default=7, help="push and stop this many times")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds allowed per CLI command")
    parser.add_argument("--output", type=Path, help="where to write the JSON results")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = datetime.datetime.now(datetime.UTC)
    env_info = harness.environment(("uvicorn", "pydantic", "aiohttp", "httpx", "click", "jinja2"))
    busy = harness.machine_busy()
    if busy > 0.2:
        harness.log_stderr(f"warning: other processes are using {busy:.2f} cores; expect noisier runs")
    pushes: list[dict[str, Any]] = []
    dry_runs: list[float] = []
    with tempfile.TemporaryDirectory(prefix="chains-bench-push-") as tmp:
        workdir = Path(tmp)
        for n in range(1, args.pushes + 1):
            home = workdir / f"home-{n}"
            env = {**os.environ, "CHAINS_HOME": str(home)}
            dry_s, _ = run_cli(
                ["push", str(CHAIN_FILE), "--dry-run", "--out", str(workdir / f"dry-{n}")], env, workdir, 60
            )
            dry_runs.append(dry_s)
            result = one_push(home, workdir, args.timeout)
            pushes.append(result)
            rss = ", ".join(f"{k} {v['VmRSS'] / 1024:.1f}" for k, v in result["memory_kib"].items())
            harness.log_stderr(
                f"push {n}/{args.pushes}: ready in {result['push_s']:.2f} s (dry run {dry_s:.2f} s), "
                f"stopped in {result['stop_s']:.2f} s; RSS MiB: {rss}"
            )
    chainlets = list(pushes[0]["memory_kib"])
    rss_mib = {c: statistics.median(p["memory_kib"][c]["VmRSS"] / 1024 for p in pushes) for c in chainlets}
    hwm_mib = {c: statistics.median(p["memory_kib"][c]["VmHWM"] / 1024 for p in pushes) for c in chainlets}
    supervisor_mib = statistics.median(p["supervisor_kib"].get("VmRSS", 0) / 1024 for p in pushes)
    push_median = statistics.median(p["push_s"] for p in pushes)
    summary = {
        "push_to_ready_s": push_median,
        "push_to_ready_s_all": [p["push_s"] for p in pushes],
        "dry_run_s": statistics.median(dry_runs),
        "stop_s": statistics.median(p["stop_s"] for p in pushes),
        "rss_mib": rss_mib,
        "peak_rss_mib": hwm_mib,
        "supervisor_rss_mib": supervisor_mib,
    }
    results = [report.Check("push to ready, median", push_median, PUSH_TARGET_S, at_least=False, unit=" s")]
    results += [
        report.Check(f"{c} RSS", v, RSS_TARGET_MIB, at_least=False, unit=" MiB") for c, v in rss_mib.items()
    ]
    print(
        f"push to ready: median {push_median:.2f} s over {len(pushes)} pushes "
        f"(min {min(summary['push_to_ready_s_all']):.2f}, max {max(summary['push_to_ready_s_all']):.2f}); "
        f"dry run {summary['dry_run_s']:.2f} s; stop {summary['stop_s']:.2f} s"
    )
    for c in chainlets:
        print(f"{c:<8} RSS {rss_mib[c]:6.1f} MiB  (peak {hwm_mib[c]:6.1f} MiB)")
    print(f"supervisor RSS {supervisor_mib:6.1f} MiB")
    print(report.check_lines(results))
    output: dict[str, Any] = {
        "settings": {"pushes": args.pushes, "chain": CHAIN_FILE.name, "command": "chains push FILE --json"},
        "checks": [c.to_json() for c in results],
        "summary": summary,
        "pushes": pushes,
    }
    report.write_results("push_ready", output, args.output, started=started, environment=env_info)
    return 0


if __name__ == "__main__":
    sys.exit(main())
