"""Whether the stack's overlay network carries traffic between the swarm's nodes, checked at push.

A swarm deploys an encrypted overlay network on nodes whose kernel cannot do its IPsec (ESP
with AES-GCM) and drops that network's traffic between them: every service turns healthy
(each task's health check runs on its own node) and every call across nodes fails. So once the
services run healthy, the push calls across: from a task on the manager's node (whose engine
the target talks to) it opens a TCP connection to every task on another node, at its address
on the stack's network. One that cannot be reached fails the push, saying what to change.
"""

from __future__ import annotations

import json
import time
from typing import Any

from chains.errors import ChainsUsageError
from chains.targets.docker_engine import Engine

__all__ = ["CONNECT_TIMEOUT_SEC", "check_overlay"]

CONNECT_TIMEOUT_SEC = 4.0  # per connection, as the stubs' own connect timeout
_ROUNDS = 3  # a route between nodes may take the swarm's gossip a moment once the tasks run
_ROUND_PAUSE_SEC = 2.0

# Run with the task's own Python (every chainlet image has one): the targets it reaches not.
_PROBE = """
import json, socket, sys
failed = []
for host, port in json.loads(sys.argv[1]):
    try:
        socket.create_connection((host, port), timeout=float(sys.argv[2])).close()
    except OSError as exc:
        failed.append([host, port, str(exc) or type(exc).__name__])
print(json.dumps(failed))
"""


def check_overlay(
    engine: Engine,
    manager_node: str,
    network: str,
    services: list[Any],
    port: int,
    *,
    encrypted: bool,
    nodes: dict[str, str],
) -> str | None:
    """Refuse (a usage error) when a task on the manager's node cannot reach a task of
    ``services`` on another node over ``network`` (the stack's overlay, by name). ``nodes``: node
    ID -> host name. Returns why nothing could be checked (all tasks on one node), else None."""
    tasks = [t for s in services for t in s.tasks() if t.get("DesiredState") == "running"]
    sources = [t for t in tasks if t.get("NodeID") == manager_node and _container(t)]
    targets = {
        (address, str(t.get("NodeID"))) for t in tasks if t.get("NodeID") != manager_node
        for address in _addresses(t, network)
    }  # fmt: skip
    if not targets:
        return "every task runs on one node"
    if not sources:
        return "no task runs on the manager's node, whose engine chains talks to"
    container = engine.client.containers.get(_container(sources[0]))
    wanted = sorted(targets)
    failed: list[list[Any]] = []
    for round_ in range(_ROUNDS):
        done = container.exec_run(
            ["python3", "-c", _PROBE, json.dumps([[a, port] for a, _ in wanted]), str(CONNECT_TIMEOUT_SEC)]
        )
        raw = done.output if isinstance(done.output, bytes) else b"".join(done.output)
        output = raw.decode(errors="replace").strip()
        try:
            failed = json.loads(output.splitlines()[-1])
        except (ValueError, IndexError):
            return f"the probe could not run in {container.name}: {output[-300:]}"
        if not failed:
            return None
        unreached = {str(f[0]) for f in failed}
        wanted = [(a, n) for a, n in wanted if a in unreached]
        if round_ < _ROUNDS - 1:
            time.sleep(_ROUND_PAUSE_SEC)
    where = {a: nodes.get(n, n) for a, n in wanted}
    lines = "\n  ".join(f"{host}:{p} on node {where.get(host, '?')}: {reason}" for host, p, reason in failed)
    source = nodes.get(manager_node, manager_node)
    if encrypted:
        fix = (
            "the overlay network is encrypted (IPsec), and a swarm drops an encrypted network's "
            "traffic between nodes whose kernel cannot do IPsec ESP with AES-GCM (the esp4 and "
            "rfc4106(gcm(aes)) modules); load those modules on every node, or push with "
            "CHAINS_SWARM_ENCRYPT=0 for an unencrypted overlay (the chainlets still call each other "
            "over TLS unless CHAINS_SWARM_TLS=0)"
        )
    else:
        fix = (
            "the nodes must reach each other on UDP port 4789 (VXLAN) and TCP/UDP 7946 (gossip): "
            "open them in the firewall between the nodes"
        )
    raise ChainsUsageError(
        f"the stack's overlay network does not carry calls between the swarm's nodes: a task on node "
        f"{source} could not connect within {CONNECT_TIMEOUT_SEC:.0f}s to\n  {lines}\n{fix}"
    )


def _container(task: dict[str, Any]) -> str:
    return str(((task.get("Status") or {}).get("ContainerStatus") or {}).get("ContainerID") or "")


def _addresses(task: dict[str, Any], network: str) -> list[str]:
    """The task's addresses on the network named ``network`` (without their prefix length)."""
    found = []
    for attachment in task.get("NetworksAttachments") or []:
        if ((attachment.get("Network") or {}).get("Spec") or {}).get("Name") == network:
            found += [str(a).split("/")[0] for a in attachment.get("Addresses") or []]
    return found
