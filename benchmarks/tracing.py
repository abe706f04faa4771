"""What tracing costs per request: the 1-hop chain of ``one_hop`` with tracing off and on (issue 18).

In the same run, with the same wrk, three copies of ``benchmarks/chains/one_hop.py`` (Front -> Back):

- ``tracing-off``: no collector, no store: OpenTelemetry is not even imported;
- ``tracing-store``: every span written to a local trace store (SQLite), as ``chains push`` does;
- ``tracing-otlp``: every span sent to an OTLP/HTTP receiver on 127.0.0.1 (a sink in this process
  that reads and drops each batch, so what is measured is the chainlets' side).

Then what the hooks left in the server and the stubs cost when tracing is off, timed in this
process: the checks one call through a hop makes (``self._tracing is None`` in the server,
``tracing.active()`` three times in the stub); and what reading a hop's W3C ``traceparent`` and
``tracestate`` costs with OpenTelemetry's propagator and with chains' own reader.

And what tracing adds to a chainlet's start-up: importing the server, then setting tracing up
(importing OpenTelemetry's SDK, and the OTLP exporter for a collector), in fresh interpreters.

Run from the repository root: ``.venv/bin/python -m benchmarks.tracing`` (about 2 minutes).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import timeit
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from benchmarks import harness, report
from benchmarks.asgi_frameworks import BODY
from benchmarks.chainlets import CHAINS_DIR, generate_chain, new_token, serve_chainlet

OFF = "tracing-off"
STORE = "tracing-store"
OTLP = "tracing-otlp"
BASELINE = {OFF: OFF, STORE: OFF, OTLP: OFF}
CHAIN_FILE = CHAINS_DIR / "one_hop.py"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    report.add_load_arguments(parser, duration=3.0, rounds=5)
    parser.add_argument("--startup-runs", type=int, default=15, help="fresh interpreters per variant")
    parser.set_defaults(connections="1,64")
    return parser.parse_args(argv)


class _Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    batches = 0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        type(self).batches += 1
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def otlp_sink() -> Iterator[str]:
    server = ThreadingHTTPServer((harness.HOST, 0), _Sink)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{harness.HOST}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def off_hook_ns(repeats: int = 7, number: int = 200_000) -> float:
    """Nanoseconds the tracing checks cost one call through a hop when tracing is off."""
    from chains import tracing

    class App:
        _tracing = None

    app = App()

    def hooks() -> None:
        _ = app._tracing is None  # the server
        tracing.active()  # the stub: _with_retries, _headers, _note_answer
        tracing.active()
        tracing.active()

    def baseline() -> None:
        pass

    with_hooks = min(timeit.repeat(hooks, number=number, repeat=repeats)) / number
    without = min(timeit.repeat(baseline, number=number, repeat=repeats)) / number
    return (with_hooks - without) * 1e9


def propagation_us(repeats: int = 7, number: int = 20_000) -> dict[str, float]:
    """Microseconds to read one hop's ``traceparent`` and ``tracestate`` with OpenTelemetry's
    global propagator and with chains' own reader (chains/tracing/w3c.py)."""
    from opentelemetry import propagate
    from opentelemetry.trace import TraceState

    from chains.tracing.w3c import Propagation

    skip = TraceState([("chains", "skip")])
    ours = Propagation((TraceState([("chains", "store")]), skip))
    headers = {
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "tracestate": "chains=skip",
    }

    def best(call: Any) -> float:
        return min(timeit.repeat(call, number=number, repeat=repeats)) / number * 1e6

    return {
        "read_otel": best(lambda: propagate.extract(headers)),
        "read_chains": best(lambda: ours.extract(headers)),
    }


_STARTUP = """
import json, sys, time
w0, c0 = time.perf_counter(), time.process_time()
import chains.server.serve
from chains import tracing
w1, c1 = time.perf_counter(), time.process_time()
tracing.configure("Front", "bench", tracing.TraceSettings.from_env(json.loads(sys.argv[1])))
w2, c2 = time.perf_counter(), time.process_time()
print(json.dumps({"server_ms": (w1 - w0) * 1e3, "tracing_ms": (w2 - w1) * 1e3,
                  "server_cpu_ms": (c1 - c0) * 1e3, "tracing_cpu_ms": (c2 - c1) * 1e3}))
"""


def startup_ms(store: Path, runs: int) -> dict[str, dict[str, float]]:
    """Median milliseconds (wall clock and CPU) a chainlet process spends importing the server,
    then setting tracing up, per variant; fresh interpreters, the variants taking turns."""
    variants = {
        OFF: {},
        STORE: {"CHAINS_TRACE_STORE": str(store)},
        OTLP: {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"},
    }
    figures: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    for _ in range(runs):
        for name, env in variants.items():
            completed = subprocess.run(
                [sys.executable, "-c", _STARTUP, json.dumps(env)],
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            )
            figures[name].append(json.loads(completed.stdout))
    return {
        name: {key: statistics.median(run[key] for run in runs_) for key in runs_[0]}
        for name, runs_ in figures.items()
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    loads = report.loads_from(args)
    started = datetime.datetime.now(datetime.UTC)
    env = harness.environment(
        ("uvicorn", "pydantic", "aiohttp", "opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-http")
    )
    token = new_token()
    with tempfile.TemporaryDirectory(prefix="chains-bench-") as tmp, contextlib.ExitStack() as stack:
        chain = generate_chain(CHAIN_FILE, Path(tmp))
        back_dir, front_dir = chain.chainlets["Back"].directory, chain.chainlets["Front"].directory
        sink = stack.enter_context(otlp_sink())
        variants = {
            OFF: {},
            STORE: {"CHAINS_TRACE_STORE": str(Path(tmp) / "traces.sqlite")},
            OTLP: {"OTEL_EXPORTER_OTLP_ENDPOINT": sink},
        }
        endpoints = []
        for name, tracing_env in variants.items():
            back = stack.enter_context(
                serve_chainlet(back_dir, entrypoint=False, token=token, env=tracing_env)
            )
            front = stack.enter_context(
                serve_chainlet(
                    front_dir,
                    entrypoint=True,
                    token=token,
                    dependency_urls={"Back": [back.base_url]},
                    env=tracing_env,
                )
            )
            endpoints.append(
                harness.Endpoint(
                    name, front.url("/run_remote"), BODY, pids=(front.process.pid, back.process.pid)
                )
            )
        answers = {e.name: e.probe()[1] for e in endpoints}
        if len(set(answers.values())) != 1:
            raise RuntimeError(f"the variants answer differently: {answers}")
        summaries = harness.measure_interleaved(endpoints, loads, rounds=args.rounds)
        batches = _Sink.batches
        startup = startup_ms(Path(tmp) / "startup.sqlite", args.startup_runs)
    print(report.summary_table(summaries, BASELINE))
    hook_ns = off_hook_ns()
    propagation = propagation_us()
    at = {(s.target, s.load.connections): s for s in summaries}
    per_request = {
        f"{name} c={load.connections}": {
            "rps_ratio_to_off": at[(name, load.connections)].rps / at[(OFF, load.connections)].rps,
            "p50_ratio_to_off": at[(name, load.connections)].p50_ms / at[(OFF, load.connections)].p50_ms,
            "added_cpu_us_per_request": at[(name, load.connections)].server_cpu_per_request_us
            - at[(OFF, load.connections)].server_cpu_per_request_us,
            "paired_p50_ratio_median": statistics.median(
                on.wrk.p50_ms / off.wrk.p50_ms
                for on, off in zip(
                    at[(name, load.connections)].runs, at[(OFF, load.connections)].runs, strict=True
                )
            ),
        }
        for name in (STORE, OTLP)
        for load in loads
    }
    for key, figures in per_request.items():
        print(
            f"{key}: rps {figures['rps_ratio_to_off']:.2f}x of off, p50 {figures['p50_ratio_to_off']:.2f}x "
            f"(paired {figures['paired_p50_ratio_median']:.2f}x), "
            f"+{figures['added_cpu_us_per_request']:.0f} us CPU per request"
        )
    off_cpu = at[(OFF, loads[-1].connections)].server_cpu_per_request_us
    print(
        f"tracing off: the hooks cost {hook_ns:.0f} ns per hop, {hook_ns / 1e3 / off_cpu:.4%} of the "
        f"{off_cpu:.0f} us of CPU a 1-hop request takes"
    )
    print(
        f"W3C context per hop: read in {propagation['read_chains']:.1f} us "
        f"(OpenTelemetry's propagator: {propagation['read_otel']:.1f})"
    )
    print(f"OTLP batches received by the sink: {batches}")
    for name, times in startup.items():
        print(
            f"start-up, {name}: importing the server {times['server_ms']:.0f} ms "
            f"(CPU {times['server_cpu_ms']:.0f}), then setting tracing up {times['tracing_ms']:.0f} ms "
            f"(CPU {times['tracing_cpu_ms']:.0f})"
        )
    output: dict[str, Any] = {
        "settings": {
            "rounds": args.rounds,
            "duration_s": args.duration,
            "connections": [ld.connections for ld in loads],
            "body": BODY.decode(),
            "baseline": BASELINE,
        },
        "per_request": per_request,
        "off_hook_ns_per_hop": hook_ns,
        "propagation_us": propagation,
        "otlp_batches": batches,
        "startup_ms_median": startup,
        "results": [s.to_json() for s in summaries],
    }
    report.write_results("tracing", output, args.output, started=started, environment=env)
    return 0 if all(s.errors == 0 for s in summaries) else 1


if __name__ == "__main__":
    sys.exit(main())
