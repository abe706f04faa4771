"""The swarm's nodes, as the swarm target sees them: the manager, the other nodes' engines, and
the chainlets' images carried onto them.

A swarm schedules a service's tasks on any of its nodes but does not move images between
them: an image built on the manager is missing on every other node until it is loaded there.
So the target asks, before it deploys, whether the engine it talks to is a manager, whether
the swarm can place the entrypoint (it publishes its port on managers, one task per node),
and which engines the other nodes are (``CHAINS_SWARM_NODES``); then it loads each image
into each node that lacks it, ``docker save | docker load``, one stream per node. What the
target reports of a task's node (its address, its name) is read here too.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from chains import progress
from chains.errors import ChainsRuntimeError, ChainsUsageError
from chains.progress import Stage
from chains.targets.docker_engine import Engine

__all__ = [
    "COPY_TIMEOUT_SEC",
    "Manager",
    "check_placement",
    "distribute_images",
    "docker_cli",
    "manager_of",
    "node_address",
    "node_engines",
    "node_name",
    "unreachable_nodes",
]

COPY_TIMEOUT_SEC = 1800.0  # the images of one push into one node

Log = Callable[[str], None]


@dataclass(frozen=True)
class Manager:
    """The swarm manager the target talks to: its own node and the swarm it manages."""

    node_id: str
    cluster: str


def node_engines() -> list[str]:
    """The engine addresses of the swarm's other nodes, from ``CHAINS_SWARM_NODES``."""
    raw = os.environ.get("CHAINS_SWARM_NODES", "")
    return [part for part in raw.replace(",", " ").split() if part]


def manager_of(engine: Engine) -> Manager:
    """``engine`` as a swarm manager; a usage error naming the fix when it is none."""
    info = engine.client.info().get("Swarm") or {}
    if info.get("LocalNodeState") != "active" or not info.get("ControlAvailable"):
        raise ChainsUsageError(
            f"the engine at {os.environ.get('DOCKER_HOST') or 'the default socket'} is not a swarm manager "
            f"(swarm state: {info.get('LocalNodeState') or 'inactive'}); point DOCKER_HOST at a manager, "
            "or make this engine one with `docker swarm init`"
        )
    return Manager(str(info.get("NodeID") or ""), str((info.get("Cluster") or {}).get("ID", "")))


def check_placement(engine: Engine, entrypoint: str, replicas: int) -> None:
    """Refuse a push the swarm cannot place: more entrypoint replicas than managers, or other
    nodes whose engines ``CHAINS_SWARM_NODES`` does not name (the images could not reach them)."""
    nodes = engine.client.nodes.list()
    count = len(nodes)
    managers = sum(1 for n in nodes if (n.attrs.get("Spec") or {}).get("Role") == "manager")
    if replicas > managers:
        raise ChainsUsageError(
            f"the entrypoint {entrypoint} asks for {replicas} replicas and the swarm has "
            f"{managers} manager node(s): the entrypoint runs on managers, one per node, publishing its "
            "port there; lower Compute(replicas=...) of the entrypoint or promote nodes "
            "(docker node promote)"
        )
    if count > 1 and not node_engines():
        raise ChainsUsageError(
            f"the swarm has {count} nodes and the images are built on the manager only; name the "
            "other nodes' engines in CHAINS_SWARM_NODES (e.g. CHAINS_SWARM_NODES='ssh://node2 "
            "tcp://node3:2376') so that chains loads the images there"
        )


def distribute_images(engine: Engine, manager: Manager, images: dict[str, str], log: Log) -> dict[str, str]:
    """Load every image into every other node's engine that does not have it yet; returns the
    engine address of each of those nodes, by node ID (for :func:`unreachable_nodes`)."""
    nodes = engine.client.nodes.list()
    addresses = node_engines()
    seen = {manager.node_id}
    engines: dict[str, str] = {}
    for address in addresses:
        other = _connect_node(address)
        node_id = ((other.client.info().get("Swarm") or {}).get("NodeID")) or ""
        if node_id not in {n.id for n in nodes}:
            raise ChainsUsageError(
                f"the engine at {address} (CHAINS_SWARM_NODES) is not a node of the swarm "
                f"{manager.cluster}; join it (docker swarm join) or leave it out"
            )
        seen.add(node_id)
        engines[node_id] = address
        missing = [t for t in sorted(set(images.values())) if other.image_id(t) != engine.image_id(t)]
        other.client.close()
        if missing:
            started = time.monotonic()
            with progress.board(title="loading the images", log=log) as board:
                board.update(address, Stage.WORKING, f"loading {len(missing)} image(s)")
                _copy_images(address, missing)
                board.update(address, Stage.DONE, f"loaded {len(missing)} image(s)")
            log(f"loaded {len(missing)} image(s) into {address} in {time.monotonic() - started:.1f}s")
    unknown = [n for n in nodes if n.id not in seen and _node_ready(n.attrs)]
    if unknown:
        names = ", ".join(str((n.attrs.get("Description") or {}).get("Hostname") or n.id) for n in unknown)
        log(
            f"warning: no engine address for node(s) {names} in CHAINS_SWARM_NODES: tasks placed "
            "there can only start if the images are there already"
        )
    return engines


def unreachable_nodes(engines: dict[str, str], timeout: float = 2.0) -> set[str]:
    """The IDs of the nodes whose engine (``engines``: node ID -> address) does not answer now.

    The manager takes a node for down only after missing its heartbeats for several seconds,
    and until then lists its tasks as running; its engine not answering is the sooner sign."""
    if not engines:
        return set()
    sdk = __import__("docker")
    lost = set()
    for node_id, address in engines.items():
        try:
            client = sdk.DockerClient(base_url=address, timeout=timeout)
            try:
                client.ping()
            finally:
                client.close()
        except (sdk.errors.DockerException, OSError):  # requests' errors are OSErrors
            lost.add(node_id)
    return lost


def docker_cli() -> str:
    """The ``docker`` command, which the swarm target runs for what the Engine API lacks."""
    cli = shutil.which("docker")
    if cli is None:
        raise ChainsUsageError(
            "the swarm target runs `docker stack deploy` and `docker save | docker load`, and the docker "
            "command is missing: install the Docker CLI (Debian: apt-get install docker.io)"
        )
    return cli


def node_address(node: dict[str, Any]) -> str:
    """The address a node's published ports answer on, from its ``docker node inspect`` attributes."""
    address = str((node.get("Status") or {}).get("Addr") or "")
    if address in ("", "0.0.0.0"):
        # Some engines report a manager's own address only as the one it serves the swarm on.
        address = str((node.get("ManagerStatus") or {}).get("Addr") or "127.0.0.1").rsplit(":", 1)[0]
    return address


def node_name(node: dict[str, Any]) -> str:
    """A node's host name, else its ID, for the lines that say where a task runs."""
    return str((node.get("Description") or {}).get("Hostname") or node.get("ID") or "?")


def _node_ready(attrs: dict[str, Any]) -> bool:
    return (attrs.get("Status") or {}).get("State") == "ready"


def _connect_node(address: str) -> Engine:
    sdk = __import__("docker")
    try:
        client = sdk.DockerClient(base_url=address, timeout=600)
        client.ping()
    except sdk.errors.DockerException as exc:
        raise ChainsRuntimeError(
            f"the swarm node engine {address} (CHAINS_SWARM_NODES) does not answer: {exc}"
        ) from None
    return Engine(client)


def _copy_images(address: str, tags: list[str]) -> None:
    """``docker save TAGS | docker -H ADDRESS load``: one archive, so that the layers the images
    share (the base image, the dependencies) travel once; streamed, never held whole."""
    cli = docker_cli()
    save = subprocess.Popen([cli, "save", *tags], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        load = subprocess.run(
            [cli, "-H", address, "load", "-q"],
            stdin=save.stdout,
            capture_output=True,
            text=True,
            timeout=COPY_TIMEOUT_SEC,
            check=False,
        )
    except subprocess.TimeoutExpired:
        save.kill()
        raise ChainsRuntimeError(
            f"loading the images into {address} took more than {COPY_TIMEOUT_SEC:.0f}s"
        ) from None
    finally:
        if save.stdout is not None:
            save.stdout.close()
    saved = save.wait(60)
    if saved != 0 or load.returncode != 0:
        reason = (save.stderr.read().decode(errors="replace") if save.stderr else "") or load.stderr
        raise ChainsRuntimeError(f"could not load the images into {address}: {reason.strip()}")
