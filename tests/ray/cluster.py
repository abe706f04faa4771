"""A real two-node Ray cluster on this machine: a head on 127.0.0.2 and a worker on 127.0.0.3.

Ray rewrites 127.0.0.1 to the host's address, so each node gets an address of its own in
127.0.0.0/8. Every node is a ``ray start --block`` in a session of its own: stopping a node
signals that process group and nothing else (never ``ray stop``, which stops every Ray
process of the machine). Every wait is bounded.

Ray's TLS is on (``RAY_USE_TLS=1``): the certificates are made by chains
(:func:`chains.targets.certificates.write_node_certificates`, an authority of the cluster's
own in ``DIR/tls``, one certificate naming both node addresses), and every Ray process, the
nodes' and each driver's (:attr:`RayCluster.env`), is started with them.
Serve's proxy serves HTTPS with the head's certificate of that authority, so that a chainlet
on the worker calls its dependencies through the proxy, with the chain's token, in TLS;
drivers get ``CHAINS_RAY_PROXY_CA_FILE`` (the chainlets trust the authority for the proxy, and
the push records it for ``chains call`` and ``chains status``, which need no ``SSL_CERT_FILE``;
the test process's own clients take :meth:`RayCluster.ssl_context`). ``CHAINS_TEST_RAY_TLS=0``
starts the cluster without TLS, proxy included (to compare, by hand).

From a shell::

    python -m tests.ray.cluster start DIR   # prints RAY_ADDRESS=... and the proxy's URL
    python -m tests.ray.cluster stop DIR
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

from chains.targets.certificates import write_node_certificates
from chains.targets.ray import PROXY_CA_ENV
from chains.tls import client_context
from tests.helpers import unique_port

HEAD_IP = "127.0.0.2"
WORKER_IP = "127.0.0.3"
# Logical CPUs each node offers to the scheduler. They are a count Ray schedules against,
# not cores it takes: what runs is the chainlets' replicas, mostly idle.
CPUS_PER_NODE = 4
OBJECT_STORE_BYTES = 100 * 2**20
START_TIMEOUT = 120.0
STOP_GRACE = 15.0
# `serve start` takes no TLS options; Serve's Python API does (http_options' ssl_*file).
_SERVE_START = """
import json, sys
import ray
from ray import serve
options = json.loads(sys.argv[1])
ray.init(address=options.pop("address"), namespace="serve", logging_level="ERROR")
serve.start(proxy_location="HeadOnly", http_options=options)
"""


def _ray() -> str:
    return str(Path(sys.executable).with_name("ray"))


@dataclass
class Node:
    ip: str
    temp_dir: str
    pid: int = 0
    log: str = ""


@dataclass
class RayCluster:
    """Two nodes started by :meth:`start`, each stopped by its own process group."""

    directory: Path
    gcs_port: int = 0
    serve_port: int = 0
    dashboard_port: int = 0
    client_port: int = 0
    nodes: dict[str, Node] = field(default_factory=dict)
    tls_env: dict[str, str] = field(default_factory=dict)  # RAY_USE_TLS and the RAY_TLS_* files

    @property
    def address(self) -> str:
        return f"{HEAD_IP}:{self.gcs_port}"

    @property
    def env(self) -> dict[str, str]:
        """What a driver (``chains push``, ``ray``, ``serve``) of this cluster is run with."""
        env = {"RAY_ADDRESS": self.address, **self.tls_env}
        if self.tls_env:
            env[PROXY_CA_ENV] = self.tls_env["RAY_TLS_CA_CERT"]
        return env

    def ssl_context(self) -> ssl.SSLContext | None:
        """What a client of the proxy verifies it with: the cluster's authority (None without TLS)."""
        return client_context(Path(self.tls_env["RAY_TLS_CA_CERT"])) if self.tls_env else None

    @property
    def client_address(self) -> str:
        """The head's Ray Client server, for ``--address ray://...``."""
        return f"ray://{HEAD_IP}:{self.client_port}"

    @property
    def proxy_url(self) -> str:
        return f"{'https' if self.tls_env else 'http'}://{HEAD_IP}:{self.serve_port}"

    @property
    def dashboard_url(self) -> str:
        return f"http://{HEAD_IP}:{self.dashboard_port}"

    # -- nodes -------------------------------------------------------------------------------

    def _ports(self) -> list[str]:
        return [
            "--node-manager-port", str(unique_port()),
            "--object-manager-port", str(unique_port()),
            "--dashboard-agent-listen-port", str(unique_port()),
            "--dashboard-agent-grpc-port", str(unique_port()),
            "--runtime-env-agent-port", str(unique_port()),
            "--metrics-export-port", str(unique_port()),
        ]  # fmt: skip

    def _start_node(self, role: str, args: list[str]) -> Node:
        ip = HEAD_IP if role == "head" else WORKER_IP
        stopped = self.nodes.get(role)
        if stopped is not None and not stopped.pid:
            shutil.rmtree(stopped.temp_dir, ignore_errors=True)  # a node started again starts afresh
        # Short: Ray puts unix sockets under it, whose paths are limited to about 100 bytes.
        temp_dir = tempfile.mkdtemp(prefix=f"ray{role[0]}-", dir="/tmp")
        log = self.directory / f"{role}.log"
        command = [
            _ray(), "start", "--block",
            "--node-ip-address", ip,
            "--num-cpus", str(CPUS_PER_NODE),
            "--num-gpus", "0",
            "--object-store-memory", str(OBJECT_STORE_BYTES),
            "--temp-dir", temp_dir,
            "--disable-usage-stats",
            *self._ports(),
            *args,
        ]  # fmt: skip
        env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", **self.tls_env)
        with open(log, "wb") as out:
            process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, env=env,
            )  # fmt: skip
        node = Node(ip=ip, temp_dir=temp_dir, pid=process.pid, log=str(log))
        self.nodes[role] = node
        self._save()
        return node

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        if os.environ.get("CHAINS_TEST_RAY_TLS") != "0":
            self.tls_env = write_node_certificates(self.directory / "tls", [HEAD_IP, WORKER_IP])
        self.gcs_port = unique_port()
        self.serve_port = unique_port()
        self.dashboard_port = unique_port()
        self.client_port = unique_port()
        self._start_node(
            "head",
            [
                "--head",
                "--port", str(self.gcs_port),
                "--ray-client-server-port", str(self.client_port),
                # The dashboard serves Ray's state API: where replicas run, and their logs.
                "--include-dashboard", "true",
                "--dashboard-host", HEAD_IP,
                "--dashboard-port", str(self.dashboard_port),
            ],
        )  # fmt: skip
        self._wait_nodes(1)
        self.start_worker()
        self._start_serve()

    def start_worker(self) -> None:
        self._start_node("worker", ["--address", self.address])
        self._wait_nodes(2)

    def _ray_command(self, *args: str, timeout: float = START_TIMEOUT) -> str:
        env = dict(os.environ, **self.env)
        done = subprocess.run(
            [_ray(), *args], capture_output=True, text=True, timeout=timeout, env=env, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"ray {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
        return done.stdout

    def alive_nodes(self) -> list[str]:
        """The node IPs Ray's state API (served by the head's dashboard) reports alive."""
        try:
            with urllib.request.urlopen(f"{self.dashboard_url}/api/v0/nodes", timeout=10) as response:
                nodes = json.loads(response.read())["data"]["result"]["result"]
        except (OSError, ValueError, KeyError):
            return []
        return [str(node["node_ip"]) for node in nodes if node.get("state") == "ALIVE"]

    def _wait_nodes(self, count: int) -> None:
        """Until every node started says so, then until the GCS counts ``count`` nodes alive."""
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            for role, node in self.nodes.items():
                if node.pid and not _group_alive(node.pid):
                    tail = Path(node.log).read_text(errors="replace")[-3000:]
                    raise RuntimeError(f"ray {role} node exited while starting:\n{tail}")
            started = all(
                "Ray runtime started" in Path(n.log).read_text(errors="replace")
                for n in self.nodes.values()
                if n.pid
            )
            if started and len(self.alive_nodes()) >= count:
                return
            time.sleep(1.0)
        raise RuntimeError(f"the cluster did not reach {count} node(s) within {START_TIMEOUT:.0f}s")

    def _start_serve(self) -> None:
        # One proxy, on the head: a proxy per node would have both bind the same port here.
        env = dict(os.environ, **self.env)
        options: dict[str, object] = {"address": self.address, "host": HEAD_IP, "port": self.serve_port}
        if self.tls_env:
            # The head's certificate names its address, which the chainlets call the proxy at.
            options["ssl_certfile"] = self.tls_env["RAY_TLS_SERVER_CERT"]
            options["ssl_keyfile"] = self.tls_env["RAY_TLS_SERVER_KEY"]
        done = subprocess.run(
            [sys.executable, "-c", _SERVE_START, json.dumps(options)],
            capture_output=True, text=True, timeout=START_TIMEOUT, env=env, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"serve start failed:\n{done.stdout}\n{done.stderr}")

    # -- stopping ----------------------------------------------------------------------------

    def stop_node(self, role: str, grace: float = STOP_GRACE) -> None:
        """Stop one node: every process of its session (its raylet, agents and workers)."""
        node = self.nodes.get(role)
        if node is None or not node.pid:
            return
        _stop_group(node.pid, grace)
        node.pid = 0
        self._save()

    def stop(self) -> None:
        for role in ("worker", "head"):
            self.stop_node(role)
        for node in self.nodes.values():
            shutil.rmtree(node.temp_dir, ignore_errors=True)

    # -- persistence (for the command line) --------------------------------------------------

    def _save(self) -> None:
        data = {
            "gcs_port": self.gcs_port,
            "serve_port": self.serve_port,
            "dashboard_port": self.dashboard_port,
            "client_port": self.client_port,
            "nodes": {role: asdict(node) for role, node in self.nodes.items()},
            "tls_env": self.tls_env,
        }
        (self.directory / "cluster.json").write_text(json.dumps(data, indent=2))

    @classmethod
    def load(cls, directory: Path) -> RayCluster:
        data = json.loads((directory / "cluster.json").read_text())
        cluster = cls(
            directory, data["gcs_port"], data["serve_port"], data["dashboard_port"], data["client_port"]
        )
        cluster.nodes = {role: Node(**node) for role, node in data["nodes"].items()}
        cluster.tls_env = dict(data.get("tls_env") or {})
        return cluster


def _session_members(sid: int) -> list[int]:
    """The processes of session ``sid``: a node's ``ray start`` and everything it started
    (Ray puts workers in process groups of their own, but they stay in the session)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # After the command: state, ppid, pgrp, session.
        if int(fields[3]) == sid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def _group_alive(sid: int) -> bool:
    return bool(_session_members(sid))


def _signal_all(sid: int, sig: signal.Signals) -> None:
    for pid in _session_members(sid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _stop_group(sid: int, grace: float) -> None:
    """SIGTERM every process of session ``sid`` (one this module created), then SIGKILL what is left."""
    _signal_all(sid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _group_alive(sid):
        time.sleep(0.1)
    _signal_all(sid, signal.SIGKILL)
    # Reap the leader when this process started it.
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(sid, os.WNOHANG)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("start", "stop"):
        print("usage: python -m tests.ray.cluster start|stop DIR", file=sys.stderr)
        return 2
    directory = Path(argv[1]).absolute()
    if argv[0] == "start":
        cluster = RayCluster(directory)
        try:
            cluster.start()
        except BaseException:
            cluster.stop()
            raise
        print(f"RAY_ADDRESS={cluster.address}")
        print(f"SERVE_URL={cluster.proxy_url}")
        for name, value in cluster.tls_env.items():
            print(f"{name}={value}")
        return 0
    RayCluster.load(directory).stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
