"""Tests on a real two-node Docker Swarm: two dockerd, the second in a network namespace of its own.

The session's ``swarm`` fixture starts the cluster once with ``docker/swarm-cluster.sh`` (node 1
in this host's namespace, node 2 behind a veth pair), puts the chainlets' base image
``CHAINS_TEST_BASE_IMAGE`` (default ``chains-python:bookworm``) on node 1, the manager, where
pushes build (node 2 gets the layers with the images each push loads there), and removes it
all at the end. It reads the machine's state first (:mod:`tests.docker.host_state`), for
``test_swarm_teardown.py`` to compare with after a stop (it then starts the cluster again).
The base image is copied from the engine ``DOCKER_HOST`` names when that one
has it (CI builds it there), else built on node 1 with ``docker/build-base-image.sh``.

The tests need root, dockerd (Debian: ``apt-get install docker.io iproute2 iptables``) and
the ``docker`` command. Without them they are skipped, saying why; with
``CHAINS_REQUIRE_SWARM=1`` (CI) they fail instead. ``CHAINS_SWARM_DIR=FOLDER`` runs them on
the cluster in FOLDER, started (or found running) there and left running afterwards, so
that one cluster serves several runs while working on them.

Chains pushed here have names starting with ``sw-``.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests import helpers
from tests.docker.host_state import HostState, host_state
from tests.jobs.postgres import ReachablePostgres, remove, start_postgres

REQUIRED = os.environ.get("CHAINS_REQUIRE_SWARM") == "1"
BASE_IMAGE = os.environ.get("CHAINS_TEST_BASE_IMAGE") or "chains-python:bookworm"
ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "docker" / "swarm-cluster.sh"
HOW = (
    "the swarm tests need root, dockerd and the docker command (apt-get install docker.io iproute2 "
    "iptables); set CHAINS_REQUIRE_SWARM=1 to make this a failure"
)


def unavailable(reason: str) -> None:
    if REQUIRED:
        pytest.fail(f"CHAINS_REQUIRE_SWARM=1 but {reason}", pytrace=False)
    pytest.skip(f"{reason}; {HOW}")


def run(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> str:
    done = subprocess.run(
        list(args), capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL
    )
    if done.returncode != 0:
        raise AssertionError(f"{shlex.join(args)} failed ({done.returncode}):\n{done.stderr}\n{done.stdout}")
    return done.stdout


@dataclass
class Swarm:
    """The running two-node cluster."""

    folder: Path
    env: dict[str, str]  # DOCKER_HOST (node 1, the manager), CHAINS_SWARM_NODES (node 2), ...
    before: HostState | None = None  # the machine before the cluster started (None: kept running)
    outer: str | None = None  # the engine the base image is copied from

    def restart(self) -> HostState:
        """Stop the cluster, read the machine's state, start it again (with the base image):
        the state in between."""
        stop_cluster(self.folder)
        between = host_state()
        self.env = _start(self.folder)
        _place_base_image(self, self.outer)
        return between

    @property
    def node1(self) -> str:
        return self.env["DOCKER_HOST"]

    @property
    def node2(self) -> str:
        return self.env["CHAINS_SWARM_NODE2_HOST"]

    @property
    def ipsec(self) -> bool:
        """Whether this kernel can encrypt overlay traffic (IPsec ESP with AES-GCM)."""
        return self.env.get("CHAINS_SWARM_IPSEC") == "1"

    @property
    def link(self) -> str:
        """The host's end of the veth pair: the wire between the two nodes."""
        return self.env["CHAINS_SWARM_LINK"]

    def docker(self, *args: str, host: str | None = None, timeout: float = 120) -> str:
        return run("docker", "-H", host or self.node1, *args, timeout=timeout)

    def node_ids(self) -> dict[str, str]:
        """Node ID -> the engine address it answers at (node 1 is the manager)."""
        ids = {}
        for host in (self.node1, self.node2):
            ids[self.docker("info", "--format", "{{.Swarm.NodeID}}", host=host).strip()] = host
        return ids

    def node2_pid(self) -> int:
        return int((self.folder / "node2" / "dockerd.pid").read_text().strip())

    def stop_node2(self) -> int:
        """SIGTERM to node 2's dockerd, by its PID (it stops its containers); the PID."""
        pid = self.node2_pid()
        os.kill(pid, signal.SIGTERM)
        return pid

    def start_node2(self) -> None:
        run(str(SCRIPT), "start-node", str(self.folder), timeout=60)
        helpers.wait_until(lambda: self.ready_nodes() == 2, 60, "node 2 to be Ready again", poll=0.5)

    def ready_nodes(self) -> int:
        out = self.docker("node", "ls", "--format", "{{.Status}}")
        return out.split().count("Ready")


def _checks() -> None:
    if os.geteuid() != 0:
        unavailable("not running as root (network namespaces and a second dockerd need it)")
    for tool in ("dockerd", "docker", "ip", "iptables", "unshare"):
        if shutil.which(tool) is None:
            unavailable(f"{tool} is not installed")
    try:
        import docker  # noqa: F401
    except ImportError:
        unavailable("the docker SDK is not installed (pip install -e '.[dev]')")


def _place_base_image(swarm: Swarm, outer: str | None) -> None:
    """The base image on node 1 (copied from ``outer``, else built). Node 2 gets its layers
    with the chainlets' images, which the push loads there."""
    env = {**os.environ}

    def has(host: str) -> bool:
        found = subprocess.run(
            ["docker", "-H", host, "image", "inspect", BASE_IMAGE], capture_output=True, timeout=60
        )
        return found.returncode == 0

    def copy(source: str, target: str) -> None:
        save = subprocess.Popen(["docker", "-H", source, "save", BASE_IMAGE], stdout=subprocess.PIPE)
        try:
            subprocess.run(
                ["docker", "-H", target, "load", "-q"],
                stdin=save.stdout,
                check=True,
                timeout=300,
                capture_output=True,
            )
        finally:
            assert save.stdout is not None
            save.stdout.close()
            assert save.wait(60) == 0, f"docker save {BASE_IMAGE} failed"

    if not has(swarm.node1):
        if outer and outer != swarm.node1 and has(outer):
            copy(outer, swarm.node1)
        else:
            env["DOCKER_HOST"] = swarm.node1
            run(str(ROOT / "docker" / "build-base-image.sh"), BASE_IMAGE, env=env, timeout=1200)


def _start(folder: Path) -> dict[str, str]:
    """Start the cluster in ``folder`` (or find it running there): the variables it prints."""
    out = run(str(SCRIPT), "start", str(folder), timeout=180)
    env = {}
    for line in out.splitlines():
        if line.startswith("export ") and "=" in line:
            key, _, value = line.removeprefix("export ").partition("=")
            env[key] = value
    return env


def stop_cluster(folder: Path) -> None:
    """``swarm-cluster.sh stop``: fails loudly when anything could not be removed."""
    run(str(SCRIPT), "stop", str(folder), timeout=180)


@pytest.fixture(scope="session")
def swarm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Swarm]:
    """The two-node swarm, started once for the session and removed after it."""
    _checks()
    kept = os.environ.get("CHAINS_SWARM_DIR")
    folder = Path(kept) if kept else tmp_path_factory.mktemp("swarm")
    outer = os.environ.get("DOCKER_HOST")
    before = None if kept else host_state()
    try:
        env = _start(folder)
    except AssertionError as exc:
        with contextlib.suppress(AssertionError):
            if not kept:
                stop_cluster(folder)
        unavailable(f"the two-node swarm did not start: {exc}")
        raise
    cluster = Swarm(folder, env, before=before, outer=outer)
    try:
        _place_base_image(cluster, outer)
        yield cluster
    finally:
        if not kept:
            stop_cluster(folder)


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One wheel cache for the session: wheels are gathered once, by the first push."""
    return tmp_path_factory.mktemp("chains-cache")


class Cli(helpers.Cli):
    """The command line pushing to the swarm, with the session's wheel cache and base image."""

    def __init__(
        self, swarm: Swarm, home: Path, cache: Path, target: str = "swarm", encrypt: bool | None = None
    ) -> None:
        env = {**swarm.env, "CHAINS_CACHE_DIR": str(cache), "CHAINS_BASE_IMAGE": BASE_IMAGE}
        # An encrypted overlay where the kernel can encrypt it (the target's default); where it
        # cannot, the swarm drops its traffic between nodes: tests/swarm/test_swarm_link.py.
        env["CHAINS_SWARM_ENCRYPT"] = "1" if (swarm.ipsec if encrypt is None else encrypt) else "0"
        super().__init__(home, env=env, target=target, timeout=600)


def remove_stack(swarm: Swarm, stack: str) -> None:
    """Whatever a test left of stack ``stack`` (services, network, secrets), removed."""
    with contextlib.suppress(AssertionError):
        swarm.docker("stack", "rm", stack)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        left = swarm.docker("network", "ls", "-q", "--filter", f"label=com.docker.stack.namespace={stack}")
        if not left.strip():
            break
        time.sleep(0.5)
    secrets = swarm.docker("secret", "ls", "-q", "--filter", f"label=chains.chain={stack}").split()
    if secrets:
        with contextlib.suppress(AssertionError):
            swarm.docker("secret", "rm", *secrets)


def service_tasks(swarm: Swarm, service: str) -> list[dict[str, Any]]:
    """The tasks of ``service`` that should run, as ``docker service ps`` reports them."""
    import json

    out = swarm.docker(
        "service", "ps", service, "--filter", "desired-state=running", "--no-trunc", "--format", "{{json .}}"
    )
    rows = [json.loads(line) for line in out.splitlines() if line.strip()]
    for row in rows:
        task = json.loads(swarm.docker("inspect", "--type", "task", row["ID"]))[0]
        row["NodeID"] = task["NodeID"]
        row["State"] = task["Status"]["State"]
    return rows


# Where the entrypoint's tasks come from when they reach the host: they run on managers only,
# and node 1 is the only one, so from its docker_gwbridge, a subnet of dockerd's default
# address pools.
_NODE1_POOLS = ("172.16.0.0/12", "192.168.0.0/16")


@pytest.fixture(scope="session")
def swarm_postgres(swarm: Swarm) -> Iterator[ReachablePostgres]:
    """A PostgreSQL server on 127.0.0.1 and on the host's end of the link between the nodes,
    letting in node 1's tasks with a password."""
    shown = run("ip", "-4", "-o", "addr", "show", "dev", swarm.link).split()
    link = ipaddress.ip_interface(shown[shown.index("inet") + 1])
    server = start_postgres(also_listen=[str(link.ip)], clients=_NODE1_POOLS)
    try:
        yield ReachablePostgres(server, str(link.ip))
    finally:
        remove(server)
