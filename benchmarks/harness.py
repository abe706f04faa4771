"""Reproducible HTTP load benchmarks: a real uvicorn subprocess driven by wrk over loopback.

The machine this runs on has 2 cores that the server and the load generator share, and its speed
drifts from minute to minute. Hence the design:

* the server is one uvicorn process (one core at most, because of the GIL) and wrk runs with a single
  thread, so each gets a core instead of four threads fighting over two (see ``DEFAULT_WRK_THREADS``);
* configurations are run interleaved (A, B, C, A, B, C, ...) so drift hits every configuration alike,
  and the medians across rounds are reported, with the per-run figures kept to show the spread;
* every subprocess has a time limit, and traffic only ever goes to 127.0.0.1.

Typical use::

    target = Target("starlette", "benchmarks.apps.bare_starlette:app", path="/generate", body=b"{}")
    summaries = run_interleaved([target], [LoadSpec(connections=64)], rounds=3)
"""

from __future__ import annotations

import contextlib
import http.client
import importlib.metadata
import json
import os
import platform
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

HOST = "127.0.0.1"

# One wrk thread: a uvicorn worker saturates one core, and one epoll thread of wrk drives tens of
# thousands of requests per second on the other, far beyond what a Python server answers. A second wrk
# thread only takes CPU time from the server it is measuring (the measurement behind this is in
# docs/server-framework.md).
DEFAULT_WRK_THREADS = 1

# uvloop and httptools are what `uvicorn[standard]` brings and what a production chainlet will run
# with; the comparison with asyncio + h11 is in docs/server-framework.md.
DEFAULT_LOOP = "uvloop"
DEFAULT_HTTP = "httptools"

JSON_HEADERS: Mapping[str, str] = {"Content-Type": "application/json"}

# wrk prints its human-readable report first; the done() hook of our Lua script then prints this line,
# with exact counts and microsecond latencies instead of wrk's rounded, unit-suffixed text.
_RESULT_MARKER = "CHAINS_WRK_RESULT "

Log = Callable[[str], None]


def log_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------- wrk


def ensure_wrk(log: Log = log_stderr) -> str:
    """Return the path of ``wrk``, installing Debian's package first if it is missing."""
    found = shutil.which("wrk")
    if found is not None:
        return found
    if os.geteuid() != 0:
        raise RuntimeError("wrk is not installed and installing it needs root: apt-get install -y wrk")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (["apt-get", "update"], ["apt-get", "install", "-y", "wrk"]):
        log(f"wrk not found; running: {' '.join(argv)}")
        subprocess.run(argv, check=True, env=env, timeout=600, stdout=subprocess.DEVNULL)
    found = shutil.which("wrk")
    if found is None:
        raise RuntimeError("apt-get install -y wrk succeeded but wrk is still not on PATH")
    log(f"installed {found}")
    return found


def wrk_version(wrk: str | None = None) -> str:
    # `wrk -v` prints its banner and exits non-zero, so the exit status says nothing here.
    completed = subprocess.run(
        [wrk or ensure_wrk(), "-v"], capture_output=True, text=True, timeout=10, check=False
    )
    return (completed.stdout or completed.stderr).splitlines()[0].strip()


@dataclass(frozen=True, slots=True)
class LoadSpec:
    """One wrk invocation's shape: closed-loop load from ``connections`` keep-alive connections."""

    connections: int
    duration_s: float = 5.0
    threads: int = DEFAULT_WRK_THREADS
    # Requests slower than this count as timeout errors rather than stretching the tail.
    timeout_s: float = 2.0

    def __post_init__(self) -> None:
        if self.connections < 1 or self.threads < 1 or self.duration_s <= 0:
            raise ValueError(f"invalid load spec: {self}")


@dataclass(frozen=True, slots=True)
class WrkResult:
    """What one wrk run measured. Latencies are in milliseconds."""

    requests: int
    duration_s: float
    requests_per_s: float
    mean_ms: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    # wrk counts a response as failed when its status is >= 400, so a 3xx would pass unnoticed; the
    # readiness probe in `serve` therefore insists on a 2xx before any load is sent.
    http_errors: int
    connect_errors: int
    read_errors: int
    write_errors: int
    timeout_errors: int

    @property
    def socket_errors(self) -> int:
        return self.connect_errors + self.read_errors + self.write_errors + self.timeout_errors

    @property
    def errors(self) -> int:
        return self.http_errors + self.socket_errors


def _lua_string(data: bytes) -> str:
    # Three-digit decimal escapes for anything not plainly printable, so no body can end the string
    # early or be read differently by LuaJIT.
    escaped = "".join(
        chr(byte) if 0x20 <= byte < 0x7F and byte not in (0x22, 0x5C) else f"\\{byte:03d}" for byte in data
    )
    return f'"{escaped}"'


def post_lua(body: bytes, headers: Mapping[str, str] = JSON_HEADERS) -> str:
    """The wrk script: POST ``body`` with ``headers`` on every request and report results as JSON."""
    lines = ['wrk.method = "POST"', f"wrk.body = {_lua_string(body)}"]
    lines += [
        f"wrk.headers[{_lua_string(k.encode())}] = {_lua_string(v.encode())}" for k, v in headers.items()
    ]
    # No response() hook: defining one makes wrk hand every response to Lua and slows it several-fold.
    lines.append(
        """
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "\\n%s{\\"requests\\":%d,\\"duration_us\\":%d,\\"connect\\":%d,\\"read\\":%d,\\"write\\":%d,"
    .. "\\"status\\":%d,\\"timeout\\":%d,\\"mean_us\\":%.3f,\\"p50_us\\":%d,\\"p90_us\\":%d,"
    .. "\\"p99_us\\":%d,\\"max_us\\":%d}\\n",
    "%MARKER%", summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency.mean, latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
""".replace("%MARKER%", _RESULT_MARKER)
    )
    return "\n".join(lines)


def parse_wrk_output(output: str) -> WrkResult:
    """Read the line our ``done()`` hook printed; raise with wrk's own output if it is missing."""
    for line in output.splitlines():
        if line.startswith(_RESULT_MARKER):
            raw: dict[str, Any] = json.loads(line[len(_RESULT_MARKER) :])
            break
    else:
        raise RuntimeError(f"wrk printed no result line; its output was:\n{output}")
    duration_s = raw["duration_us"] / 1e6
    return WrkResult(
        requests=raw["requests"],
        duration_s=duration_s,
        requests_per_s=raw["requests"] / duration_s if duration_s > 0 else 0.0,
        mean_ms=raw["mean_us"] / 1e3,
        p50_ms=raw["p50_us"] / 1e3,
        p90_ms=raw["p90_us"] / 1e3,
        p99_ms=raw["p99_us"] / 1e3,
        max_ms=raw["max_us"] / 1e3,
        http_errors=raw["status"],
        connect_errors=raw["connect"],
        read_errors=raw["read"],
        write_errors=raw["write"],
        timeout_errors=raw["timeout"],
    )


def run_wrk(
    url: str,
    body: bytes,
    load: LoadSpec,
    *,
    headers: Mapping[str, str] = JSON_HEADERS,
    cpus: frozenset[int] | None = None,
) -> WrkResult:
    """Run wrk against ``url`` (which must be on 127.0.0.1) once, and return what it measured."""
    if not url.startswith(f"http://{HOST}:"):
        raise ValueError(f"load is only ever sent to {HOST}, not to {url}")
    wrk = ensure_wrk()
    with tempfile.TemporaryDirectory(prefix="chains-wrk-") as tmp:
        script = Path(tmp, "post.lua")
        script.write_text(post_lua(body, headers))
        argv = [
            wrk,
            f"--threads={load.threads}",
            f"--connections={load.connections}",
            f"--duration={load.duration_s:g}s",
            f"--timeout={load.timeout_s:g}s",
            "--latency",
            f"--script={script}",
            url,
        ]
        completed = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            # wrk stops itself after the duration; the margin covers start-up and the last timeouts.
            timeout=load.duration_s + load.timeout_s + 15,
            check=False,
            preexec_fn=_pin(cpus),
        )
    if completed.returncode != 0:
        raise RuntimeError(f"wrk exited with {completed.returncode}:\n{completed.stdout}{completed.stderr}")
    return parse_wrk_output(completed.stdout)


def _pin(cpus: frozenset[int] | None) -> Callable[[], None] | None:
    if cpus is None:
        return None

    def pin() -> None:
        os.sched_setaffinity(0, cpus)

    return pin


# ------------------------------------------------------------------------------------------ server


@dataclass(frozen=True, slots=True)
class UvicornOptions:
    loop: str = DEFAULT_LOOP
    http: str = DEFAULT_HTTP
    extra_args: tuple[str, ...] = ()

    def argv(self, app: str, port: int) -> list[str]:
        return [
            sys.executable,
            "-m",
            "uvicorn",
            app,
            f"--host={HOST}",
            f"--port={port}",
            f"--loop={self.loop}",
            f"--http={self.http}",
            # Access logging is per-request work that would be measured instead of the app.
            "--no-access-log",
            "--log-level=warning",
            *self.extra_args,
        ]


@dataclass(slots=True)
class RunningServer:
    port: int
    process: subprocess.Popen[bytes]
    log_file: IO[bytes]

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def url(self, path: str) -> str:
        return self.base_url + path

    def log_text(self) -> str:
        self.log_file.flush()
        self.log_file.seek(0)
        return self.log_file.read().decode(errors="replace")


def free_port() -> int:
    # The port could in theory be taken between here and uvicorn's bind; `serve` would then fail loudly
    # on the process exiting, which is acceptable for a benchmark.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def probe(
    port: int,
    path: str,
    body: bytes | None,
    headers: Mapping[str, str] = JSON_HEADERS,
    timeout_s: float = 2.0,
) -> tuple[int, bytes]:
    """POST ``body`` once (GET when it is None) with the standard library; return the status and body."""
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout_s)
    try:
        if body is None:
            conn.request("GET", path)
        else:
            conn.request("POST", path, body=body, headers=dict(headers))
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


@contextlib.contextmanager
def serve(
    app: str,
    *,
    ready_path: str,
    ready_body: bytes,
    ready_headers: Mapping[str, str] = JSON_HEADERS,
    options: UvicornOptions = UvicornOptions(),
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    cpus: frozenset[int] | None = None,
    startup_timeout_s: float = 20.0,
    stop_timeout_s: float = 10.0,
) -> Iterator[RunningServer]:
    """Run ``app`` (an import string) under uvicorn on 127.0.0.1 until the block exits.

    The server only counts as started once a POST of ``ready_body`` to ``ready_path`` answers 2xx, so a
    broken app fails here, not as a wall of wrk errors.
    """
    port = free_port()
    with serve_command(
        options.argv(app, port),
        port,
        ready_path=ready_path,
        ready_body=ready_body,
        ready_headers=ready_headers,
        env=env,
        cwd=cwd,
        cpus=cpus,
        startup_timeout_s=startup_timeout_s,
        stop_timeout_s=stop_timeout_s,
    ) as server:
        yield server


@contextlib.contextmanager
def serve_command(
    argv: Sequence[str],
    port: int,
    *,
    ready_path: str,
    ready_body: bytes | None,
    ready_headers: Mapping[str, str] = JSON_HEADERS,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    cpus: frozenset[int] | None = None,
    startup_timeout_s: float = 20.0,
    stop_timeout_s: float = 10.0,
) -> Iterator[RunningServer]:
    """Run any HTTP server command that listens on 127.0.0.1:``port`` until the block exits.

    For servers that are not an import string for uvicorn, such as a generated chainlet's ``server.py``.
    Readiness is a POST of ``ready_body`` to ``ready_path`` answering 2xx (a GET when ``ready_body`` is
    None); a 503 means "still starting" and is retried until ``startup_timeout_s``.
    """
    # The apps are imported by module path, so the repository root must be importable from the child.
    root = Path(__file__).resolve().parent.parent
    child_env = {**os.environ, **(env or {})}
    child_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), child_env.get("PYTHONPATH")]))
    # A file, not a pipe: nobody reads the pipe while wrk runs, and a full pipe would stall the server.
    with tempfile.TemporaryFile() as log_file:
        process = subprocess.Popen(
            list(argv),
            cwd=cwd or root,
            env=child_env,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            preexec_fn=_pin(cpus),
        )
        server = RunningServer(port, process, log_file)
        try:
            _wait_ready(server, ready_path, ready_body, ready_headers, startup_timeout_s)
            yield server
        finally:
            _stop(process, stop_timeout_s)


def _wait_ready(
    server: RunningServer, path: str, body: bytes | None, headers: Mapping[str, str], timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    last_error = "no attempt"
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(
                f"server exited with {server.process.returncode} before answering:\n{server.log_text()}"
            )
        try:
            status, reply = probe(server.port, path, body, headers)
        except OSError as exc:
            last_error = repr(exc)
        else:
            if 200 <= status < 300:
                return
            if status != 503:
                raise RuntimeError(f"readiness probe got {status}: {reply[:500]!r}\n{server.log_text()}")
            # 503: listening, but still starting (a chainlet server answers so until __init__ is done).
            last_error = f"503 {reply[:200]!r}"
        time.sleep(0.05)
    raise TimeoutError(f"server not ready after {timeout_s:g}s ({last_error}):\n{server.log_text()}")


def _stop(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    if process.poll() is not None:
        return
    # SIGTERM is what an orchestrator sends; uvicorn shuts down gracefully on it.
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=timeout_s)


# ------------------------------------------------------------------------------------ interleaving


@dataclass(frozen=True, slots=True)
class Target:
    """A server configuration to measure: an ASGI app and the request wrk sends to it."""

    name: str
    app: str
    path: str
    body: bytes
    headers: Mapping[str, str] = field(default_factory=lambda: dict(JSON_HEADERS))
    options: UvicornOptions = UvicornOptions()
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CpuUsage:
    """Where the machine's CPU time went during one run, in CPU-seconds summed over all cores.

    ``other_s`` is the rest of the machine: kernel network time for the loopback traffic (so it is never
    zero) plus any process that is not ours. A run whose ``other_s`` jumps was disturbed; a run whose
    ``server_s`` is well below ``wall_s`` under many connections means the server was not the bottleneck.
    When a target is several processes (a chain of servers), ``server_s`` is their sum and
    ``server_parts_s`` has each one's share, in the order of the target's pids.
    """

    wall_s: float
    server_s: float
    wrk_s: float
    other_s: float
    steal_s: float
    server_parts_s: tuple[float, ...] = ()


def _machine_cpu(tick: float) -> tuple[float, float]:
    """Busy and stolen CPU-seconds of the whole machine since boot."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return 0.0, 0.0
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq) / tick, steal / tick


def _clock_tick() -> float:
    return float(os.sysconf("SC_CLK_TCK"))


def process_cpu_s(pid: int, tick: float | None = None) -> float:
    """User + system CPU-seconds used so far by process ``pid`` (0 when it cannot be read)."""
    try:
        # The command name in field 2 may contain spaces; the fields after its closing parenthesis
        # start at field 3, which puts utime and stime (fields 14 and 15) at indexes 11 and 12.
        after = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(after[11]) + int(after[12])) / (tick or _clock_tick())


class CpuMeter:
    """Measures where CPU time goes while a block runs; reads /proc, so Linux only (zeros elsewhere).

    The load generator's share (``CpuUsage.wrk_s``) is the CPU of this process's children that were
    waited for meanwhile (wrk), or with ``client_is_self`` this process's own, for a client written in
    Python that runs here instead.
    """

    def __init__(self, server_pids: Sequence[int], *, client_is_self: bool = False) -> None:
        self._server_pids = tuple(server_pids)
        self._who = resource.RUSAGE_SELF if client_is_self else resource.RUSAGE_CHILDREN
        self._tick = _clock_tick()

    def _servers(self) -> list[float]:
        return [process_cpu_s(pid, self._tick) for pid in self._server_pids]

    @contextlib.contextmanager
    def measure(self) -> Iterator[list[CpuUsage]]:
        out: list[CpuUsage] = []
        wall0, (busy0, steal0), servers0 = time.monotonic(), _machine_cpu(self._tick), self._servers()
        # wrk is the only child that is waited for meanwhile (the servers are still running), so the
        # growth of the children's usage is wrk's.
        client0 = resource.getrusage(self._who)
        yield out
        client1 = resource.getrusage(self._who)
        wall1, (busy1, steal1), servers1 = time.monotonic(), _machine_cpu(self._tick), self._servers()
        wrk_s = (client1.ru_utime - client0.ru_utime) + (client1.ru_stime - client0.ru_stime)
        parts = tuple(after - before for before, after in zip(servers0, servers1, strict=True))
        server_s = sum(parts)
        out.append(
            CpuUsage(
                wall_s=wall1 - wall0,
                server_s=server_s,
                wrk_s=wrk_s,
                other_s=max(0.0, (busy1 - busy0) - server_s - wrk_s),
                steal_s=steal1 - steal0,
                server_parts_s=parts,
            )
        )


def machine_busy(interval_s: float = 1.0) -> float:
    """How many cores' worth of CPU the machine uses right now, sampled over ``interval_s``.

    Unlike the load average, this does not still count a benchmark that ended a minute ago.
    """
    tick = _clock_tick()
    before, _ = _machine_cpu(tick)
    time.sleep(interval_s)
    after, _ = _machine_cpu(tick)
    return (after - before) / interval_s


@dataclass(frozen=True, slots=True)
class Run:
    wrk: WrkResult
    cpu: CpuUsage


@dataclass(frozen=True, slots=True)
class Summary:
    """All runs of one target at one load, and their medians."""

    target: str
    load: LoadSpec
    runs: tuple[Run, ...]

    @property
    def rps(self) -> float:
        return statistics.median(r.wrk.requests_per_s for r in self.runs)

    @property
    def p50_ms(self) -> float:
        return statistics.median(r.wrk.p50_ms for r in self.runs)

    @property
    def p99_ms(self) -> float:
        return statistics.median(r.wrk.p99_ms for r in self.runs)

    @property
    def errors(self) -> int:
        return sum(r.wrk.errors for r in self.runs)

    @property
    def rps_spread(self) -> float:
        """(max - min) / median of the per-run rps: how far a single run could have misled."""
        values = [r.wrk.requests_per_s for r in self.runs]
        return (max(values) - min(values)) / self.rps if self.rps else 0.0

    @property
    def server_cpu_per_request_us(self) -> float:
        """Median server CPU time per request: the cost figure that does not depend on wrk's share."""
        return statistics.median(
            r.cpu.server_s / r.wrk.requests * 1e6 if r.wrk.requests else 0.0 for r in self.runs
        )

    @property
    def other_cores(self) -> float:
        """Median CPU use by the rest of the machine during the runs, in cores; near 0 on a quiet one."""
        return statistics.median(r.cpu.other_s / r.cpu.wall_s if r.cpu.wall_s else 0.0 for r in self.runs)

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "connections": self.load.connections,
            "threads": self.load.threads,
            "duration_s": self.load.duration_s,
            "median": {
                "rps": self.rps,
                "p50_ms": self.p50_ms,
                "p99_ms": self.p99_ms,
                "server_cpu_per_request_us": self.server_cpu_per_request_us,
                "other_cores": self.other_cores,
            },
            "rps_spread": self.rps_spread,
            "errors": self.errors,
            "runs": [
                {**asdict(r.wrk), "socket_errors": r.wrk.socket_errors, "cpu": asdict(r.cpu)}
                for r in self.runs
            ],
        }


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A server that is already running, as :func:`measure_interleaved` loads it.

    ``pids`` are the processes whose CPU time counts as the server's: one for a plain app, every hop's
    process for a chain.
    """

    name: str
    url: str
    body: bytes
    headers: Mapping[str, str] = field(default_factory=lambda: dict(JSON_HEADERS))
    pids: tuple[int, ...] = ()

    def probe(self) -> tuple[int, bytes]:
        """Send wrk's request once, with the standard library: the status and the body."""
        parts = urllib.parse.urlsplit(self.url)
        if parts.hostname != HOST or parts.port is None:
            raise ValueError(f"load is only ever sent to {HOST}, not to {self.url}")
        return probe(parts.port, parts.path or "/", self.body, self.headers)


def run_interleaved(
    targets: Sequence[Target],
    loads: Sequence[LoadSpec],
    *,
    rounds: int = 3,
    warmup_s: float = 1.0,
    server_cpus: frozenset[int] | None = None,
    wrk_cpus: frozenset[int] | None = None,
    log: Log = log_stderr,
) -> list[Summary]:
    """Measure every target at every load ``rounds`` times, interleaved, and summarize.

    All servers are started up front and left idle while the others are measured (an idle uvicorn costs
    nothing measurable), so no run pays for a process start. Within a round, each load runs against
    every target in turn, which puts runs of competing targets seconds apart instead of minutes.
    """
    ensure_wrk(log)
    with contextlib.ExitStack() as stack:
        endpoints = []
        for t in targets:
            server = stack.enter_context(
                serve(
                    t.app,
                    ready_path=t.path,
                    ready_body=t.body,
                    ready_headers=t.headers,
                    options=t.options,
                    env=t.env,
                    cpus=server_cpus,
                )
            )
            endpoints.append(Endpoint(t.name, server.url(t.path), t.body, t.headers, (server.process.pid,)))
        return measure_interleaved(
            endpoints, loads, rounds=rounds, warmup_s=warmup_s, wrk_cpus=wrk_cpus, log=log
        )


def measure_interleaved(
    endpoints: Sequence[Endpoint],
    loads: Sequence[LoadSpec],
    *,
    rounds: int = 3,
    warmup_s: float = 1.0,
    wrk_cpus: frozenset[int] | None = None,
    log: Log = log_stderr,
) -> list[Summary]:
    """What :func:`run_interleaved` does once its servers run, for servers started by other means.

    Each round runs each load against every endpoint in turn; the summaries are in load order, then
    endpoint order.
    """
    ensure_wrk(log)
    results: dict[tuple[str, LoadSpec], list[Run]] = {(e.name, ld): [] for e in endpoints for ld in loads}
    if len(results) != len(endpoints) * len(loads):
        raise ValueError("endpoint names and load specs must be unique")
    busy = machine_busy()
    if busy > 0.2:
        log(f"warning: other processes are using {busy:.2f} cores; expect noisier runs")
    meters = {e.name: CpuMeter(e.pids) for e in endpoints}
    if warmup_s > 0:
        # Lets lazy imports, pydantic's first validations and CPython's adaptive specialization settle
        # before anything is recorded.
        warmup = LoadSpec(connections=max(ld.connections for ld in loads), duration_s=warmup_s)
        for e in endpoints:
            run_wrk(e.url, e.body, warmup, headers=e.headers, cpus=wrk_cpus)
    for round_no in range(1, rounds + 1):
        for load in loads:
            for e in endpoints:
                with meters[e.name].measure() as usage:
                    result = run_wrk(e.url, e.body, load, headers=e.headers, cpus=wrk_cpus)
                results[(e.name, load)].append(Run(result, usage[0]))
                log(
                    f"round {round_no}/{rounds} c={load.connections:<3} {e.name:<16} "
                    f"{result.requests_per_s:9.0f} rps  p50 {result.p50_ms:7.3f} ms  "
                    f"p99 {result.p99_ms:7.3f} ms  errors {result.errors}  "
                    f"cpu server {usage[0].server_s:5.2f}s wrk {usage[0].wrk_s:5.2f}s "
                    f"other {usage[0].other_s:5.2f}s"
                )
    return [Summary(e.name, ld, tuple(results[(e.name, ld)])) for ld in loads for e in endpoints]


# ------------------------------------------------------------------------------------- environment


def environment(packages: Sequence[str] = ("uvicorn", "starlette", "fastapi", "pydantic")) -> dict[str, Any]:
    """The facts needed to judge whether two sets of figures are comparable."""
    versions: dict[str, str | None] = {}
    for name in (*packages, "uvloop", "httptools"):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "nproc": os.cpu_count(),
        "cpu": _cpu_model(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "wrk": wrk_version(),
        "packages": versions,
        "loadavg_at_start": os.getloadavg(),
    }


def _cpu_model() -> str | None:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return None
