"""What the reliability tests share: pushed chains, process facts, nginx, and the figures file.

Every process a fixture starts is stopped by it; every wait is bounded. Traffic goes to
127.0.0.1 only.
"""

from __future__ import annotations

import json
import os
import pwd
import random
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from chains.deploy import ChainHandle, push_chain, stop_chain
from chains.loader import load_chain
from chains.targets import PushOptions
from chains.targets.state import ChainState, Deployment, chain_dir, read_state

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
RESULTS = HERE / "results"
SAMPLE = HERE / "sample_chains" / "reliability_chains.py"


def record(test: str, **figures: object) -> None:
    """Write a test's figures to ``results/<test>.json``, which docs/reliability.md is filled from."""
    RESULTS.mkdir(exist_ok=True)
    body = {"test": test, "recorded_at": time.strftime("%Y-%m-%d %H:%M:%S"), **figures}
    (RESULTS / f"{test}.json").write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")


# -- pushed chains ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chains_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A CHAINS_HOME of the module's own; whatever still runs in it at the end is stopped."""
    home = tmp_path_factory.mktemp("chains-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CHAINS_HOME", str(home))
        try:
            yield home
        finally:
            for state in home.glob("*/state.json"):
                stop_chain(state.parent.name, grace=5)


@contextmanager
def pushed(entrypoint: str, name: str, file: Path = SAMPLE, timeout: float = 60) -> Iterator[ChainHandle]:
    """Push chain ``name`` with ``entrypoint`` from ``file`` (as ``chains push`` does) and stop it after."""
    chain = load_chain(file, entrypoint, name)
    handle = push_chain(chain, file, "local", PushOptions(timeout=timeout))
    try:
        yield handle
    finally:
        stop_chain(name, grace=5)


def processes(name: str, chainlet: str) -> list[int]:
    """The pids of ``chainlet``'s replicas now, as the supervisor recorded them."""
    return [p.pid for p in read_state(name).replicas(chainlet) if p.pid]


def deployment(name: str) -> Deployment:
    state = read_state(name)
    path = chain_dir(name) / "deployments" / state.deployment / "deployment.json"
    return Deployment.model_validate_json(path.read_text())


def token_of(name: str) -> str:
    """The chain's internal token, read from its owner-only deployment file, as its owner may."""
    return deployment(name).chainlets[0].env["CHAINS_INTERNAL_TOKEN"]


def wait_until(condition: object, timeout: float, what: str, poll: float = 0.05) -> None:
    """Poll ``condition()`` until it is true; fail naming ``what`` after ``timeout`` seconds."""
    assert callable(condition)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(poll)
    raise AssertionError(f"not within {timeout}s: {what}")


def all_ready(name: str) -> bool:
    state: ChainState = read_state(name)
    return all(p.state == "ready" for p in state.processes)


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run the ``chains`` command line (with this process's CHAINS_HOME)."""
    return subprocess.run(
        [sys.executable, "-m", "chains", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def status_restarts(name: str) -> dict[str, int]:
    """The RESTARTS column of ``chains status NAME``, by the CHAINLET column."""
    result = cli("status", name)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    header = next(line.split() for line in lines if line.strip().startswith("CHAINLET"))
    column = header.index("RESTARTS")
    rows = [
        line.split() for line in lines if line.startswith("  ") and not line.strip().startswith("CHAINLET")
    ]
    return {row[0]: int(row[column]) for row in rows}


def rss_kib(pid: int) -> int:
    """The resident set size of ``pid`` (VmRSS in /proc/<pid>/status), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


def metric(url: str, name: str) -> float:
    """One sample of a chainlet's /metrics, by its full name with labels (0 when absent)."""
    for line in httpx.get(url + "/metrics", timeout=5).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


_handed_out: set[int] = set()


def unique_port() -> int:
    """A free port on 127.0.0.1 that no other caller in this session got, below the kernel's
    ephemeral range: a port that ``bind(0)`` handed out and released could be handed out again,
    or taken by an outgoing connection, before the process meant to listen on it binds it."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(1000):
        port = random.randrange(max(1024, low - 12000), low)
        if port in _handed_out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise AssertionError("no free port found below the ephemeral range")


# -- nginx ------------------------------------------------------------------------------------


def nginx_binary() -> str:
    """The nginx executable, installed from the system's packages when missing (CI runs as root)."""
    for candidate in (shutil.which("nginx"), "/usr/sbin/nginx"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    if os.geteuid() != 0:
        pytest.fail("nginx is not installed and only root can install it: apt-get install -y nginx")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "nginx"]
    if subprocess.run(install, env=env, capture_output=True, timeout=600, check=False).returncode != 0:
        # A fresh machine may not have the package lists yet.
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, timeout=600, check=True)
        subprocess.run(install, env=env, capture_output=True, timeout=600, check=True)
    return "/usr/sbin/nginx"


@dataclass
class Site:
    """One nginx ``server`` block: ``port`` on 127.0.0.1 proxying to ``upstream``."""

    name: str
    upstream: str
    directives: list[str] = field(default_factory=list)
    port: int = field(default_factory=unique_port)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


# What every site shares: HTTP/1.1 to the upstream, so that a chunked response keeps its
# framing through the proxy. (nginx's default, HTTP/1.0, turns the upstream's answer into a
# body delimited by closing the connection, where a cut looks like a clean end.)
_COMMON = ["proxy_http_version 1.1;", 'proxy_set_header Connection "";']


class Nginx:
    """A real nginx with its own config and files in ``folder``, in the foreground as our child."""

    def __init__(self, binary: str, folder: Path, sites: list[Site]) -> None:
        self.binary = binary
        self.folder = folder
        self.sites = {site.name: site for site in sites}
        self.process: subprocess.Popen[bytes] | None = None

    def config(self) -> str:
        f = self.folder
        user = f"user {pwd.getpwuid(os.getuid()).pw_name};" if os.geteuid() == 0 else ""
        servers = []
        for site in self.sites.values():
            lines = "\n            ".join([*_COMMON, *site.directives])
            servers.append(
                f"""
    server {{
        listen 127.0.0.1:{site.port};
        location / {{
            proxy_pass {site.upstream};
            {lines}
        }}
    }}"""
            )
        return f"""
daemon off;
worker_processes 1;
{user}
pid {f}/nginx.pid;
error_log {f}/error.log info;
events {{ worker_connections 1024; }}
http {{
    access_log {f}/access.log;
    client_body_temp_path {f}/client_body;
    proxy_temp_path {f}/proxy;
    fastcgi_temp_path {f}/fastcgi;
    uwsgi_temp_path {f}/uwsgi;
    scgi_temp_path {f}/scgi;
    {"".join(servers)}
}}
"""

    def start(self) -> Nginx:
        self.folder.mkdir(parents=True, exist_ok=True)
        conf = self.folder / "nginx.conf"
        conf.write_text(self.config())
        command = [self.binary, "-p", str(self.folder), "-c", str(conf), "-e", str(self.folder / "error.log")]
        check = subprocess.run([*command, "-t"], capture_output=True, text=True, timeout=30, check=False)
        assert check.returncode == 0, f"nginx refused its config:\n{check.stderr}\n{self.config()}"
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        for site in self.sites.values():
            wait_until(lambda s=site: _listening(s.port), 10, f"nginx listening on {site.port}")
        return self

    def errors(self) -> str:
        path = self.folder / "error.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()  # nginx's fast shutdown
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)

    def __getitem__(self, name: str) -> Site:
        return self.sites[name]


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="session")
def nginx_bin() -> str:
    return nginx_binary()
