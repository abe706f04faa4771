"""Which ASGI framework should the chainlet server be built on? Measure the same endpoint on each.

Run from the repository root: ``.venv/bin/python -m benchmarks.asgi_frameworks`` (about 3.5 minutes).
Figures and their reading are in docs/server-framework.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import harness, report
from benchmarks.report import RESULTS_DIR

BASELINE = "bare-starlette"
TARGETS = {
    BASELINE: "benchmarks.apps.bare_starlette:app",
    "fastapi": "benchmarks.apps.fastapi_app:app",
    "bare-asgi": "benchmarks.apps.bare_asgi:app",
}
# Opt-in (--streaming), as they make the run about 5.5 minutes: the same endpoint as a streaming response.
STREAMING_TARGETS = {
    "starlette-stream": "benchmarks.apps.streaming:starlette_app",
    "asgi-stream": "benchmarks.apps.streaming:asgi_app",
}
ORDER = [*TARGETS, *STREAMING_TARGETS]
# A prompt of typical length, so body parsing is not trivially small next to the framework's own work.
BODY = json.dumps(
    {
        "prompt": "Summarize the following paragraph in three short bullet points, plain text.",
        "max_tokens": 256,
    }
).encode()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--connections", default="1,16,64", help="comma-separated connection counts")
    # Five short rounds rather than three long ones: the noise here is mostly drift between runs (other
    # processes share the 2 cores), which more rounds average out better than longer runs do.
    parser.add_argument("--duration", type=float, default=4.0, help="seconds per wrk run")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds; medians are over these")
    parser.add_argument("--threads", type=int, default=harness.DEFAULT_WRK_THREADS, help="wrk threads")
    parser.add_argument("--loop", default=harness.DEFAULT_LOOP, help="uvicorn --loop")
    parser.add_argument("--http", default=harness.DEFAULT_HTTP, help="uvicorn --http")
    parser.add_argument(
        "--pin",
        action="store_true",
        help="pin the servers to CPU 0 and wrk to CPU 1 (off by default; see docs/server-framework.md)",
    )
    parser.add_argument(
        "--streaming", action="store_true", help="also measure the two streaming-response apps"
    )
    parser.add_argument(
        "--output",
        type=Path,
        help="where to write the JSON results (default: results/asgi_frameworks[_streaming].json)",
    )
    return parser.parse_args(argv)


def ratios(summaries: Sequence[harness.Summary]) -> dict[tuple[str, int], tuple[float, float]]:
    """(rps ratio, p50 ratio) of every summary to the baseline at the same connection count."""
    base = {s.load.connections: s for s in summaries if s.target == BASELINE}
    return {
        (s.target, s.load.connections): (
            s.rps / base[s.load.connections].rps,
            s.p50_ms / base[s.load.connections].p50_ms,
        )
        for s in summaries
    }


def table(summaries: Sequence[harness.Summary]) -> str:
    ratio = ratios(summaries)
    header = (
        f"{'conns':>5}  {'app':<15} {'rps':>8} {'p50 ms':>8} {'p99 ms':>8}  "
        f"{'rps/base':>8} {'p50/base':>8} {'cpu us/req':>10} {'spread':>7} {'other':>6} {'errors':>6}"
    )
    lines = [header, "-" * len(header)]
    for s in sorted(summaries, key=lambda s: (s.load.connections, ORDER.index(s.target))):
        rps_ratio, p50_ratio = ratio[(s.target, s.load.connections)]
        lines.append(
            f"{s.load.connections:>5}  {s.target:<15} {s.rps:>8.0f} {s.p50_ms:>8.3f} {s.p99_ms:>8.3f}  "
            f"{rps_ratio:>7.2f}x {p50_ratio:>7.2f}x {s.server_cpu_per_request_us:>10.1f} "
            f"{s.rps_spread:>6.0%} {s.other_cores:>6.2f} {s.errors:>6}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    connections = [int(c) for c in args.connections.split(",")]
    options = harness.UvicornOptions(loop=args.loop, http=args.http)
    targets = [
        harness.Target(name, app, path="/generate", body=BODY, options=options)
        for name, app in (TARGETS | (STREAMING_TARGETS if args.streaming else {})).items()
    ]
    loads = [
        harness.LoadSpec(connections=c, duration_s=args.duration, threads=args.threads) for c in connections
    ]
    started = datetime.datetime.now(datetime.UTC)
    env = harness.environment()
    summaries = harness.run_interleaved(
        targets,
        loads,
        rounds=args.rounds,
        server_cpus=frozenset({0}) if args.pin else None,
        wrk_cpus=frozenset({1}) if args.pin else None,
    )
    env["loadavg_at_end"] = os.getloadavg()
    print(table(summaries))

    ratio = ratios(summaries)
    results: dict[str, Any] = {
        "settings": {
            "rounds": args.rounds,
            "duration_s": args.duration,
            "wrk_threads": args.threads,
            "uvicorn": {"loop": args.loop, "http": args.http},
            "pinned": args.pin,
            "streaming": args.streaming,
            "body": BODY.decode(),
            "baseline": BASELINE,
        },
        "results": [
            {
                **s.to_json(),
                "rps_ratio": ratio[(s.target, s.load.connections)][0],
                "p50_ratio": ratio[(s.target, s.load.connections)][1],
            }
            for s in summaries
        ],
    }
    # A separate default file keeps a --streaming run from replacing the figures the docs quote.
    output: Path = (
        args.output or RESULTS_DIR / f"asgi_frameworks{'_streaming' if args.streaming else ''}.json"
    )
    report.write_results("asgi_frameworks", results, output, started=started, environment=env)
    errors = sum(s.errors for s in summaries)
    if errors:
        print(f"{errors} requests failed; these figures are not valid", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
