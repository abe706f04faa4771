"""Adaptive batching over HTTP: a fake model unbatched, batched, and its model-bound limit (issue 17).

``benchmarks/chains/batching.py`` serves the same fake model (5 ms + 0.2 ms per input, one model call
at a time) as two generated chainlets, each a real ``server.py`` process on 127.0.0.1. In the same run,
with the same wrk, interleaved round by round, at 1, 16 and 64 concurrent callers:

- ``unbatched``: ``run_remote(n: int) -> int``, one model call per call;
- ``batched``: ``@chains.batched(max_batch_size=32, max_wait_ms=5)`` over ``list[int] -> list[int]``;
- the model-bound limit: ``max_batch_size / cost(max_batch_size)``, what the model serves when every
  call is a full batch and nothing else costs time (computed, not measured).

The mean batch size of each batched run is read from the chainlet's ``/metrics`` (the
``chains_batch_size`` histogram) before and after it. So that a miss can be told apart from the
machine's load, each run also gives the cores the batched server used (its CPU time over the
run's wall time) and wrk used, next to the cores the server would need at the model-bound limit
(its CPU per call times the limit's rate): the model is fed only as fast as the server's event
loop turns callers around, and on a machine shared with other work it gets what is left.

Run from the repository root: ``.venv/bin/python -m benchmarks.batching`` (about 2 minutes).
Targets at 64 callers: batched throughput at least 0.8x the model-bound limit, with a p50 latency
under 3x one full batch's cost; no failed request.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import re
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import chains_codegen
from benchmarks import harness, report
from benchmarks.chainlets import CHAINS_DIR, new_token, serve_chainlet
from benchmarks.chains.batching import MAX_BATCH_SIZE, MAX_WAIT_MS, cost_s
from chains.loader import load_chain

BATCHED = "batched"
UNBATCHED = "unbatched"
CHAIN_FILE = CHAINS_DIR / "batching.py"
BASELINE = {BATCHED: UNBATCHED, UNBATCHED: UNBATCHED}
BODY = b'{"n": 12}'
MODEL_BOUND_RPS = MAX_BATCH_SIZE / cost_s(MAX_BATCH_SIZE)
FULL_BATCH_MS = cost_s(MAX_BATCH_SIZE) * 1e3
# Room for every caller in both servers' queues: a 503 would be a refusal, not a measurement.
QUEUE = {"CHAINS_MAX_QUEUE": "256"}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    report.add_load_arguments(parser, duration=5.0, rounds=3)
    return parser.parse_args(argv)


def batch_totals(metrics_url: str) -> tuple[float, float]:
    """(calls served in batches, batches run) so far, from the chainlet's /metrics."""
    with urllib.request.urlopen(metrics_url, timeout=5) as response:
        text = response.read().decode()
    found = {
        name: float(value)
        for name, value in re.findall(r"^chains_batch_size_(sum|count)\{[^}]*\} (\S+)$", text, re.MULTILINE)
    }
    return found["sum"], found["count"]


def measure(
    endpoints: Sequence[harness.Endpoint], loads: Sequence[harness.LoadSpec], rounds: int, metrics_url: str
) -> tuple[list[harness.Summary], dict[int, list[float]]]:
    """:func:`harness.measure_interleaved`, reading the batched chainlet's batch sizes around each run."""
    harness.ensure_wrk()
    runs: dict[tuple[str, int], list[harness.Run]] = {
        (e.name, ld.connections): [] for e in endpoints for ld in loads
    }
    mean_batch: dict[int, list[float]] = {ld.connections: [] for ld in loads}
    meters = {e.name: harness.CpuMeter(e.pids) for e in endpoints}
    warmup = harness.LoadSpec(connections=max(ld.connections for ld in loads), duration_s=1.0)
    for e in endpoints:
        harness.run_wrk(e.url, e.body, warmup, headers=e.headers)
    for round_no in range(1, rounds + 1):
        for load in loads:
            for e in endpoints:
                before = batch_totals(metrics_url)
                with meters[e.name].measure() as usage:
                    result = harness.run_wrk(e.url, e.body, load, headers=e.headers)
                after = batch_totals(metrics_url)
                runs[(e.name, load.connections)].append(harness.Run(result, usage[0]))
                note = ""
                if e.name == BATCHED:
                    calls, batches = after[0] - before[0], after[1] - before[1]
                    mean_batch[load.connections].append(calls / batches if batches else 0.0)
                    note = f"  mean batch {mean_batch[load.connections][-1]:5.1f}"
                harness.log_stderr(
                    f"round {round_no}/{rounds} c={load.connections:<3} {e.name:<10} "
                    f"{result.requests_per_s:8.0f} rps  p50 {result.p50_ms:7.3f} ms  "
                    f"p99 {result.p99_ms:7.3f} ms  errors {result.errors}{note}"
                )
    summaries = [
        harness.Summary(e.name, ld, tuple(runs[(e.name, ld.connections)])) for ld in loads for e in endpoints
    ]
    return summaries, mean_batch


def scheduler_alone(callers: int, seconds: float) -> tuple[float, float]:
    """(calls per second, mean batch size) of the batcher alone: ``callers`` coroutines in this
    process calling the same fake model's body through a :class:`Batcher` for ``seconds``, with
    no HTTP in the way. What the scheduler reaches when its callers come back at once."""
    from chains.batcher import BatchConfig, Batcher

    sizes: list[int] = []

    def body(items: list[int]) -> list[int]:
        sizes.append(len(items))
        time.sleep(cost_s(len(items)))
        return [x * x for x in items]

    async def run() -> int:
        batcher = Batcher(
            body, chainlet="Batched", config=BatchConfig(MAX_BATCH_SIZE, MAX_WAIT_MS), sync=True
        )
        until = time.perf_counter() + seconds
        served = 0

        async def caller(n: int) -> None:
            nonlocal served
            while time.perf_counter() < until:
                if await batcher.submit(n) != n * n:
                    raise AssertionError("a caller got another caller's answer")
                served += 1

        await asyncio.gather(*(caller(n) for n in range(callers)))
        await batcher.close()
        return served

    started = time.perf_counter()
    served = asyncio.run(run())
    return served / (time.perf_counter() - started), statistics.fmean(sizes)


def cpu_lines(summaries: Sequence[harness.Summary]) -> list[str]:
    """What the batched server needed and got, per load: see the module docstring."""
    lines = []
    for s in summaries:
        if s.target != BATCHED:
            continue
        got = statistics.median(r.cpu.server_s / r.cpu.wall_s for r in s.runs if r.cpu.wall_s)
        wrk = statistics.median(r.cpu.wrk_s / r.cpu.wall_s for r in s.runs if r.cpu.wall_s)
        need = s.server_cpu_per_request_us * MODEL_BOUND_RPS / 1e6
        lines.append(
            f"batched at {s.load.connections} callers: server used {got:.2f} cores "
            f"(at the limit it would need {need:.2f}), wrk {wrk:.2f}, the rest of the machine "
            f"{s.other_cores:.2f}"
        )
    return lines


def checks(summaries: Sequence[harness.Summary]) -> list[report.Check]:
    at = {(s.target, s.load.connections): s for s in summaries}
    out = []
    if (BATCHED, 64) in at:
        batched = at[(BATCHED, 64)]
        out.append(
            report.Check(
                "batched rps / model-bound limit at 64",
                batched.rps / MODEL_BOUND_RPS,
                0.8,
                at_least=True,
                unit="x",
            )
        )
        out.append(
            report.Check(
                "batched p50 / one full batch's cost at 64",
                batched.p50_ms / FULL_BATCH_MS,
                3.0,
                at_least=False,
                unit="x",
            )
        )
    out.append(report.Check("failed requests", sum(s.errors for s in summaries), 0, at_least=False))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    loads = report.loads_from(args)
    started = datetime.datetime.now(datetime.UTC)
    env = harness.environment(("uvicorn", "pydantic", "aiohttp"))
    token = new_token()
    with tempfile.TemporaryDirectory(prefix="chains-bench-") as tmp:
        dirs = {}
        for name in ("Batched", "Unbatched"):
            generated = chains_codegen.generate(load_chain(CHAIN_FILE, name), CHAIN_FILE, Path(tmp) / name)
            dirs[name] = generated.chainlets[name].directory
        with (
            serve_chainlet(dirs["Batched"], entrypoint=True, token=token, env=QUEUE) as batched,
            serve_chainlet(dirs["Unbatched"], entrypoint=True, token=token, env=QUEUE) as unbatched,
        ):
            endpoints = [
                harness.Endpoint(
                    UNBATCHED, unbatched.url("/run_remote"), BODY, pids=(unbatched.process.pid,)
                ),
                harness.Endpoint(BATCHED, batched.url("/run_remote"), BODY, pids=(batched.process.pid,)),
            ]
            answers = {e.name: e.probe() for e in endpoints}
            if any(answer != (200, b"144") for answer in answers.values()):
                raise RuntimeError(f"the targets do not answer 144 to n=12: {answers}")
            summaries, mean_batch = measure(endpoints, loads, args.rounds, batched.url("/metrics"))
    print(report.summary_table(summaries, BASELINE))
    print(
        f"model-bound limit: {MODEL_BOUND_RPS:.0f} rps "
        f"(max_batch_size {MAX_BATCH_SIZE} / {FULL_BATCH_MS:.1f} ms)"
    )
    for connections, means in mean_batch.items():
        print(f"mean batch size at {connections} callers: {', '.join(f'{m:.1f}' for m in means)}")
    for line in cpu_lines(summaries):
        print(line)
    alone = [scheduler_alone(64, 3.0) for _ in range(args.rounds)]
    for rate, mean_size in alone:
        print(
            f"the batcher alone, 64 callers in process: {rate:.0f} calls/s "
            f"({rate / MODEL_BOUND_RPS:.2f}x the limit), mean batch {mean_size:.1f}"
        )
    results = checks(summaries)
    print(report.check_lines(results))
    output: dict[str, Any] = {
        "settings": {
            "rounds": args.rounds,
            "duration_s": args.duration,
            "connections": [ld.connections for ld in loads],
            "body": BODY.decode(),
            "cost_ms": "5 + 0.2 per input",
            "max_batch_size": MAX_BATCH_SIZE,
            "model_bound_rps": MODEL_BOUND_RPS,
            "full_batch_ms": FULL_BATCH_MS,
        },
        "checks": [c.to_json() for c in results],
        "mean_batch_size": {str(c): means for c, means in mean_batch.items()},
        "cpu": cpu_lines(summaries),
        "scheduler_alone_64": [{"rps": r, "mean_batch_size": m} for r, m in alone],
        "results": [s.to_json() for s in summaries],
    }
    report.write_results("batching", output, args.output, started=started, environment=env)
    return 0 if all(c.met for c in results) else 1


if __name__ == "__main__":
    sys.exit(main())
