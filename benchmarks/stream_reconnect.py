"""What a stream that can be read on after a cut costs (chains/server/reconnect.py), against the
same stream without it, in the same run.

The chain of ``benchmarks/chains/streaming.py`` (``Producer`` yields small typed items, the
entrypoint ``Restream`` reads them through its stub and yields them on) is served twice, each as
``chains push`` serves it (request log and local trace store on): once as shipped, where every
stub and ``chains.client`` stream is reconnectable, and once with ``CHAINS_STREAM_RECONNECT_SEC=0``
on both chainlets, where no stream is. Rounds alternate between the two so that the machine's
drift falls on both. Each round reads 100,000 items with ``chains.client.AsyncClient`` (framed,
through the hop) and the same stream as server-sent events with a plain aiohttp reader (only the
hop inside the chain reconnectable). Medians and the ratio reconnectable / not.

Run from the repository root: ``.venv/bin/python -m benchmarks.stream_reconnect`` (about a
minute); ``--smoke`` for a short run that checks only that every stream arrived whole.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import uvloop

from benchmarks import harness
from benchmarks.chainlets import CHAINS_DIR, generate_chain, new_token, serve_chainlet
from benchmarks.defaults import STREAM_ITEMS, defaults_env, measure_sse, measure_stream

ON = "reconnectable"
OFF = "not reconnectable"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (default 5)")
    parser.add_argument("--items", type=int, default=STREAM_ITEMS, help="items a stream (default 100,000)")
    parser.add_argument("--smoke", action="store_true", help="one short round: check, do not measure")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.smoke:
        args.rounds, args.items = 1, 2_000
    token = new_token()
    figures: dict[str, dict[str, list[float]]] = {ON: {}, OFF: {}}
    with tempfile.TemporaryDirectory(prefix="chains-bench-") as tmp, contextlib.ExitStack() as stack:
        home = Path(tmp)
        chain = generate_chain(CHAINS_DIR / "streaming.py", home / "streaming")
        urls = {}
        for name, extra in ((ON, {}), (OFF, {"CHAINS_STREAM_RECONNECT_SEC": "0"})):
            env = {**defaults_env(home / name.replace(" ", "-")), **extra}
            Path(env["CHAINS_TRACE_STORE"]).parent.mkdir(parents=True, exist_ok=True)
            producer = stack.enter_context(
                serve_chainlet(chain.chainlets["Producer"].directory, entrypoint=False, token=token, env=env)
            )
            restream = stack.enter_context(
                serve_chainlet(
                    chain.chainlets["Restream"].directory,
                    entrypoint=True,
                    token=token,
                    env=env,
                    dependency_urls={"Producer": [producer.base_url]},
                )
            )
            urls[name] = restream.base_url
        for round_no in range(args.rounds):
            for name in (ON, OFF) if round_no % 2 == 0 else (OFF, ON):
                harness.log_stderr(f"round {round_no + 1}: {name}")
                framed = uvloop.run(measure_stream(urls[name], 1, args.items))[0]
                sse = uvloop.run(measure_sse(urls[name], 1, args.items))[0]
                for key, value in (*framed.items(), *sse.items()):
                    figures[name].setdefault(key, []).append(value)
    print(f"{args.items} items a stream, {args.rounds} alternating rounds, medians")
    print(f"{'':<20} {ON:>16} {OFF:>18} {'ratio':>8}")
    for key in ("items_per_s", "first_item_ms", "events_per_s"):
        on, off = (statistics.median(figures[name][key]) for name in (ON, OFF))
        print(f"{key:<20} {on:16.1f} {off:18.1f} {on / off:8.2f}")
    print("every stream arrived whole, in order")
    return 0


if __name__ == "__main__":
    sys.exit(main())
