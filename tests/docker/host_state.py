"""What a private engine or the test swarm changes on the machine, and must put back when stopped.

An engine adds firewall chains and rules (filter and nat), sets FORWARD's policy, turns
forwarding on, mounts namespace files, makes bridges; ``ip netns add`` mounts /run/netns onto
itself. :func:`host_state` reads all of it, in this host's network namespace or in a named one,
so that a test can compare before a start and after a stop.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, fields
from pathlib import Path

__all__ = ["HostState", "changes", "host_state"]


@dataclass(frozen=True)
class HostState:
    filter: frozenset[str]  # `iptables -S` lines: policies (-P), chains (-N), rules (-A)
    nat: frozenset[str]
    forwarding: str  # net.ipv4.ip_forward
    links: frozenset[str]
    mounts: frozenset[str]  # mount points of this mount namespace
    namespaces: frozenset[str]  # `ip netns list`


def _run(netns: Path | None, *args: str) -> str:
    prefix = ["nsenter", f"--net={netns}"] if netns else []
    done = subprocess.run([*prefix, *args], capture_output=True, text=True, timeout=30, check=True)
    return done.stdout


def host_state(netns: Path | None = None) -> HostState:
    """The state of this host's network namespace, or of the one whose file is ``netns`` (such as
    /proc/PID/ns/net); the mounts and the named namespaces are the machine's either way."""
    links = _run(netns, "ip", "-o", "link", "show").splitlines()
    mountinfo = Path("/proc/self/mountinfo").read_text().splitlines()
    return HostState(
        filter=frozenset(_run(netns, "iptables", "-t", "filter", "-S").splitlines()),
        nat=frozenset(_run(netns, "iptables", "-t", "nat", "-S").splitlines()),
        forwarding=_run(netns, "cat", "/proc/sys/net/ipv4/ip_forward").strip(),
        links=frozenset(line.split(": ")[1].split("@")[0] for line in links),
        mounts=frozenset(line.split(" ")[4] for line in mountinfo),
        namespaces=frozenset(line.split(" ")[0] for line in _run(None, "ip", "netns", "list").splitlines()),
    )


def changes(before: HostState, after: HostState) -> list[str]:
    """What differs, one line each ("+ filter -A FORWARD ..." is there now and was not)."""
    found = []
    for field in fields(HostState):
        old, new = getattr(before, field.name), getattr(after, field.name)
        if isinstance(old, str):
            if old != new:
                found.append(f"{field.name}: {old} -> {new}")
            continue
        found += [f"+ {field.name} {item}" for item in sorted(new - old)]
        found += [f"- {field.name} {item}" for item in sorted(old - new)]
    return found
