"""One chainlet's unary endpoint against the bare Starlette app doing the same work (issue 4).

The chain in ``benchmarks/chains/unary.py`` is generated with ``codegen`` and its ``server.py`` run as
``chains push`` runs it: once as the entrypoint (``CHAINS_IS_ENTRYPOINT=1``, no credentials) and once
as an internal chainlet (wrk sends the chain's token). Beside them, in the same run and with the same
wrk, ``benchmarks/apps/bare_starlette.py`` parses the same body with the same pydantic fields and
returns the same JSON.

Run from the repository root: ``.venv/bin/python -m benchmarks.chainlet_server`` (about 3.5 minutes).
Targets: throughput at 64 connections at least 0.6x the bare app's, p50 at 1 connection at most 2x.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import harness, report
from benchmarks.asgi_frameworks import BODY
from benchmarks.chainlets import CHAINS_DIR, auth_headers, generate_chain, new_token, serve_chainlet

BASELINE = "bare-starlette"
ENTRYPOINT = "chainlet-entrypoint"
INTERNAL = "chainlet-internal"
BARE_APP = "benchmarks.apps.bare_starlette:app"
CHAIN_FILE = CHAINS_DIR / "unary.py"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    return report.add_load_arguments(parser).parse_args(argv)


def checks(summaries: Sequence[harness.Summary]) -> list[report.Check]:
    at = {(s.target, s.load.connections): s for s in summaries}
    out = []
    for target in (ENTRYPOINT, INTERNAL):
        if (target, 64) in at and (BASELINE, 64) in at:
            ratio = at[(target, 64)].rps / at[(BASELINE, 64)].rps
            out.append(report.Check(f"{target} rps / bare at 64 conns", ratio, 0.6, at_least=True, unit="x"))
        if (target, 1) in at and (BASELINE, 1) in at:
            ratio = at[(target, 1)].p50_ms / at[(BASELINE, 1)].p50_ms
            out.append(report.Check(f"{target} p50 / bare at 1 conn", ratio, 2.0, at_least=False, unit="x"))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    loads = report.loads_from(args)
    started = datetime.datetime.now(datetime.UTC)
    env = harness.environment(("uvicorn", "starlette", "pydantic", "aiohttp"))
    token = new_token()
    with tempfile.TemporaryDirectory(prefix="chains-bench-") as tmp, contextlib.ExitStack() as stack:
        chain = generate_chain(CHAIN_FILE, Path(tmp))
        directory = chain.chainlets["Echo"].directory
        bare = stack.enter_context(harness.serve(BARE_APP, ready_path="/generate", ready_body=BODY))
        entry = stack.enter_context(serve_chainlet(directory, entrypoint=True, token=token))
        internal = stack.enter_context(serve_chainlet(directory, entrypoint=False, token=token))
        endpoints = [
            harness.Endpoint(BASELINE, bare.url("/generate"), BODY, pids=(bare.process.pid,)),
            harness.Endpoint(ENTRYPOINT, entry.url("/run_remote"), BODY, pids=(entry.process.pid,)),
            harness.Endpoint(
                INTERNAL, internal.url("/run_remote"), BODY, auth_headers(token), (internal.process.pid,)
            ),
        ]
        # Same request, same answer: otherwise the comparison would not be of like with like.
        answers = {e.name: e.probe() for e in endpoints}
        if len({reply for _, reply in answers.values()}) != 1:
            raise RuntimeError(f"the targets answer differently: {answers}")
        summaries = harness.measure_interleaved(endpoints, loads, rounds=args.rounds)
    baseline = {e.name: BASELINE for e in endpoints}
    print(report.summary_table(summaries, baseline))
    results = checks(summaries)
    print(report.check_lines(results))
    errors = sum(s.errors for s in summaries)
    output: dict[str, Any] = {
        "settings": {
            "rounds": args.rounds,
            "duration_s": args.duration,
            "connections": [ld.connections for ld in loads],
            "body": BODY.decode(),
            "answer": next(iter(answers.values()))[1].decode(),
            "baseline": BASELINE,
        },
        "checks": [c.to_json() for c in results],
        "results": [s.to_json() for s in summaries],
    }
    report.write_results("chainlet_server", output, args.output, started=started, environment=env)
    if errors:
        print(f"{errors} requests failed; these figures are not valid", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
