"""A 1-hop chain against its dependency called directly and against a bare 1-hop floor (issue 5).

``benchmarks/chains/one_hop.py`` is generated with ``codegen``; its entrypoint ``Front`` answers each
call by calling ``Back`` through the generated stub. In the same run, with the same wrk:

- ``chain-1hop``: wrk -> Front -> Back (both generated ``server.py`` processes);
- ``chain-direct``: wrk -> Back, the same process, with the chain's token;
- ``floor-1hop``: wrk -> ``benchmarks/apps/bare_hop.py`` -> ``bare_starlette``, plain Starlette apps
  and one shared aiohttp session;
- ``floor-direct``: wrk -> that same ``bare_starlette`` process;
- ``chain-1hop-httpx``: wrk -> Front with its stub posting through httpx's default ``AsyncClient``
  (``benchmarks/apps/httpx_front.py``) -> the same Back: why the stub uses aiohttp.

Run from the repository root: ``.venv/bin/python -m benchmarks.one_hop`` (about 4.5 minutes).
Targets: 1-hop throughput at 64 connections at least 0.6x the floor's; the p50 latency the hop adds at
1 connection (1-hop minus direct) at most 1.5x what the floor's hop adds; no failed request.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import harness, report
from benchmarks.asgi_frameworks import BODY
from benchmarks.chainlets import CHAINS_DIR, auth_headers, generate_chain, new_token, serve_chainlet

CHAIN_HOP = "chain-1hop"
CHAIN_DIRECT = "chain-direct"
FLOOR_HOP = "floor-1hop"
FLOOR_DIRECT = "floor-direct"
HTTPX_HOP = "chain-1hop-httpx"
CHAIN_FILE = CHAINS_DIR / "one_hop.py"
# Ratios are taken against the floor: each chain target against the floor target of its kind.
BASELINE = {
    CHAIN_HOP: FLOOR_HOP,
    HTTPX_HOP: FLOOR_HOP,
    FLOOR_HOP: FLOOR_HOP,
    CHAIN_DIRECT: FLOOR_DIRECT,
    FLOOR_DIRECT: FLOOR_DIRECT,
}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    report.add_load_arguments(parser, duration=3.0, rounds=5)
    parser.add_argument("--no-httpx", action="store_true", help="leave out the httpx variant")
    return parser.parse_args(argv)


def added_p50_ms(summaries: Sequence[harness.Summary], hop: str, direct: str, connections: int) -> float:
    """Median p50 of the hop minus median p50 of its dependency alone: what the hop adds."""
    at = {(s.target, s.load.connections): s for s in summaries}
    return at[(hop, connections)].p50_ms - at[(direct, connections)].p50_ms


def paired_added_p50_ms(
    summaries: Sequence[harness.Summary], hop: str, direct: str, connections: int
) -> float:
    """The same, paired by round (each round's runs are seconds apart), then the median."""
    at = {(s.target, s.load.connections): s for s in summaries}
    pairs = zip(at[(hop, connections)].runs, at[(direct, connections)].runs, strict=True)
    return statistics.median(h.wrk.p50_ms - d.wrk.p50_ms for h, d in pairs)


def checks(summaries: Sequence[harness.Summary]) -> list[report.Check]:
    at = {(s.target, s.load.connections): s for s in summaries}
    out = []
    if (CHAIN_HOP, 64) in at:
        ratio = at[(CHAIN_HOP, 64)].rps / at[(FLOOR_HOP, 64)].rps
        out.append(report.Check("1-hop rps / floor at 64 conns", ratio, 0.6, at_least=True, unit="x"))
    if (CHAIN_HOP, 1) in at:
        chain = added_p50_ms(summaries, CHAIN_HOP, CHAIN_DIRECT, 1)
        floor = added_p50_ms(summaries, FLOOR_HOP, FLOOR_DIRECT, 1)
        out.append(
            report.Check("added p50 of the hop / floor's at 1 conn", chain / floor, 1.5, at_least=False)
        )
    chain_errors = sum(s.errors for s in summaries if s.target != HTTPX_HOP)
    out.append(report.Check("failed requests (all but the httpx variant)", chain_errors, 0, at_least=False))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    loads = report.loads_from(args)
    started = datetime.datetime.now(datetime.UTC)
    env = harness.environment(("uvicorn", "starlette", "pydantic", "aiohttp", "httpx", "tenacity"))
    token = new_token()
    internal = auth_headers(token)
    with tempfile.TemporaryDirectory(prefix="chains-bench-") as tmp, contextlib.ExitStack() as stack:
        chain = generate_chain(CHAIN_FILE, Path(tmp))
        back_dir, front_dir = chain.chainlets["Back"].directory, chain.chainlets["Front"].directory
        floor_back = stack.enter_context(
            harness.serve("benchmarks.apps.bare_starlette:app", ready_path="/generate", ready_body=BODY)
        )
        floor_front = stack.enter_context(
            harness.serve(
                "benchmarks.apps.bare_hop:app",
                ready_path="/generate",
                ready_body=BODY,
                env={"BENCH_HOP_URL": floor_back.url("/generate")},
            )
        )
        back = stack.enter_context(serve_chainlet(back_dir, entrypoint=False, token=token))
        urls = {"Back": [back.base_url]}
        front = stack.enter_context(
            serve_chainlet(front_dir, entrypoint=True, token=token, dependency_urls=urls)
        )
        endpoints = [
            harness.Endpoint(FLOOR_DIRECT, floor_back.url("/generate"), BODY, pids=(floor_back.process.pid,)),
            harness.Endpoint(
                FLOOR_HOP,
                floor_front.url("/generate"),
                BODY,
                pids=(floor_front.process.pid, floor_back.process.pid),
            ),
            harness.Endpoint(CHAIN_DIRECT, back.url("/run_remote"), BODY, internal, (back.process.pid,)),
            harness.Endpoint(
                CHAIN_HOP, front.url("/run_remote"), BODY, pids=(front.process.pid, back.process.pid)
            ),
        ]
        if not args.no_httpx:
            httpx_front = stack.enter_context(
                serve_chainlet(
                    front_dir,
                    entrypoint=True,
                    token=token,
                    dependency_urls=urls,
                    argv=[sys.executable, "-m", "benchmarks.apps.httpx_front"],
                )
            )
            endpoints.append(
                harness.Endpoint(
                    HTTPX_HOP,
                    httpx_front.url("/run_remote"),
                    BODY,
                    pids=(httpx_front.process.pid, back.process.pid),
                )
            )
        # Same request, same answer everywhere: otherwise the comparison would not be of like with like.
        answers = {e.name: e.probe()[1] for e in endpoints}
        if len(set(answers.values())) != 1:
            raise RuntimeError(f"the targets answer differently: {answers}")
        summaries = harness.measure_interleaved(endpoints, loads, rounds=args.rounds)
    print(report.summary_table(summaries, BASELINE))
    results = checks(summaries)
    print(report.check_lines(results))
    added = {
        f"{hop} - {direct}": {
            "connections": c,
            "median_p50_difference_ms": added_p50_ms(summaries, hop, direct, c),
            "paired_by_round_ms": paired_added_p50_ms(summaries, hop, direct, c),
        }
        for hop, direct in ((CHAIN_HOP, CHAIN_DIRECT), (FLOOR_HOP, FLOOR_DIRECT), (HTTPX_HOP, CHAIN_DIRECT))
        for c in (1,)
        if any(s.target == hop for s in summaries)
    }
    for name, figures in added.items():
        print(
            f"added p50 at 1 conn, {name}: {figures['median_p50_difference_ms']:.3f} ms "
            f"(paired by round: {figures['paired_by_round_ms']:.3f} ms)"
        )
    output: dict[str, Any] = {
        "settings": {
            "rounds": args.rounds,
            "duration_s": args.duration,
            "connections": [ld.connections for ld in loads],
            "body": BODY.decode(),
            "baseline": BASELINE,
            "pids_order": "server_parts_s lists the front process first, then the dependency",
        },
        "checks": [c.to_json() for c in results],
        "added_p50_ms": added,
        "results": [s.to_json() for s in summaries],
    }
    report.write_results("one_hop", output, args.output, started=started, environment=env)
    return 0 if all(c.met for c in results if c.name.startswith("failed")) else 1


if __name__ == "__main__":
    sys.exit(main())
