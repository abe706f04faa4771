"""What Ray reports of a chain's replicas, read from the head's dashboard API.

Serve's details (``/api/serve/applications/``) give each chainlet's replicas: their state,
node and process. Ray's state API gives the rest: which nodes are alive (a replica Serve
still lists on a node that died is about to be replaced), and the replica actors that died
(``/api/v0/actors``), whose count, leaving out the ones Serve stopped itself (a rolling
update, a scale-down), is how often Serve had to replace a chainlet's replica: its restarts.
"""

from __future__ import annotations

import collections
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from chains.errors import ChainsRuntimeError
from chains.targets.state import ChainletProcess, ProcessState

__all__ = [
    "ReplicaInfo",
    "dashboard_error",
    "get_json",
    "live_processes",
    "replacements",
    "replicas",
    "serve_details",
]

HTTP_TIMEOUT_SEC = 10.0
# Serve's replica states as chains shows them; a replica Serve no longer lists is gone.
_STATES: dict[str, ProcessState] = {
    "STARTING": "starting",
    "UPDATING": "starting",
    "RECOVERING": "restarting",
    "RUNNING": "ready",
    "PENDING_MIGRATION": "ready",  # still serving while its node drains
    "STOPPING": "stopped",
}
# Why an actor died when Serve stopped it on purpose; any other death is a failure it replaced.
_STOPPED_BY_SERVE = "RAY_KILL"


@dataclass(frozen=True)
class ReplicaInfo:
    """One running replica of a chainlet, as Serve reports it."""

    chainlet: str
    replica_id: str
    state: str
    node_id: str
    node_ip: str
    pid: int | None
    actor_id: str
    started_at: float
    log_file: str = ""  # below the node's Ray log folder (``.../session_latest/logs``)


def get_json(url: str, timeout: float = HTTP_TIMEOUT_SEC, context: ssl.SSLContext | None = None) -> Any:
    with urllib.request.urlopen(url, timeout=timeout, context=context) as response:
        return json.loads(response.read())


def dashboard_error(exc: urllib.error.HTTPError) -> str:
    """What Ray's dashboard said with an error status: the message of its JSON answer, else its text."""
    try:
        body = exc.read().decode(errors="replace")
    except OSError:
        body = ""
    try:
        message = json.loads(body).get("msg")
    except (ValueError, AttributeError):
        message = None
    text = str(message or body).strip()
    return text[:1000] or f"HTTP {exc.code} {exc.reason}"


def serve_details(dashboard_url: str) -> dict[str, Any]:
    """Serve's details of every application, proxy and option on the cluster."""
    try:
        details: dict[str, Any] = get_json(f"{dashboard_url}/api/serve/applications/")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise ChainsRuntimeError(
            f"Ray's dashboard at {dashboard_url} does not answer ({exc}); the ray target reads "
            "replicas and logs through it: start the head node with --include-dashboard true"
        ) from None
    return details


def _deployment(details: Mapping[str, Any], app: str, chainlet: str) -> dict[str, Any]:
    application = (details.get("applications") or {}).get(app) or {}
    found: dict[str, Any] = (application.get("deployments") or {}).get(chainlet) or {}
    return found


def replicas(
    dashboard_url: str, apps: Mapping[str, str], details: Mapping[str, Any] | None = None
) -> list[ReplicaInfo]:
    """Every replica of the chainlets ``apps`` (chainlet -> application), as Serve reports them
    (in ``details``, read now when not given)."""
    details = serve_details(dashboard_url) if details is None else details
    found = []
    for chainlet, app in apps.items():
        for replica in _deployment(details, app, chainlet).get("replicas") or []:
            found.append(
                ReplicaInfo(
                    chainlet=chainlet,
                    replica_id=str(replica.get("replica_id", "")),
                    state=str(replica.get("state", "")),
                    node_id=str(replica.get("node_id") or ""),
                    node_ip=str(replica.get("node_ip") or ""),
                    pid=replica.get("pid"),
                    actor_id=str(replica.get("actor_id") or ""),
                    started_at=float(replica.get("start_time_s") or 0.0),
                    log_file=str(replica.get("log_file_path") or ""),
                )
            )
    return found


def _state_api(dashboard_url: str, resource: str, filters: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    query: list[tuple[str, str | int]] = [("detail", 1), ("limit", 10000)]
    for key, value in filters:
        query += [("filter_keys", key), ("filter_predicates", "="), ("filter_values", value)]
    url = f"{dashboard_url}/api/v0/{resource}?{urllib.parse.urlencode(query)}"
    try:
        answer = get_json(url)
        rows: list[dict[str, Any]] = answer["data"]["result"]["result"]
    except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError) as exc:
        raise ChainsRuntimeError(f"Ray's state API at {dashboard_url} does not answer ({exc})") from None
    return rows


def replacements(dashboard_url: str, apps: Mapping[str, str]) -> dict[str, int]:
    """How many replicas of each chainlet died without Serve stopping them (a crash, a lost
    node), in the cluster's memory of dead actors: each was replaced by Serve."""
    counts: dict[str, int] = {}
    for chainlet, app in apps.items():
        dead = _state_api(
            dashboard_url, "actors", [("class_name", f"ServeReplica:{app}:{chainlet}"), ("state", "DEAD")]
        )
        counts[chainlet] = sum(
            ((row.get("death_cause") or {}).get("actor_died_error_context") or {}).get("reason")
            != _STOPPED_BY_SERVE
            for row in dead
        )
    return counts


def _alive_nodes(dashboard_url: str) -> set[str]:
    return {str(row.get("node_id")) for row in _state_api(dashboard_url, "nodes", [("state", "ALIVE")])}


def live_processes(
    dashboard_url: str,
    apps: Mapping[str, str],
    recorded: Sequence[ChainletProcess],
    restarts_before: Mapping[str, int],
    details: Mapping[str, Any] | None = None,
) -> list[ChainletProcess]:
    """The chain's replicas as Ray reports them now, in the shape of the ``recorded`` ones:
    each chainlet's replicas (oldest first), their node, process and state, and, shared out
    over the newest of them, how many replicas Serve replaced since the push (the count
    then, ``restarts_before``, left out). A replica whose node Ray reports dead is
    ``restarting``: Serve replaces it once Ray tells it so."""
    details = serve_details(dashboard_url) if details is None else details
    found = collections.defaultdict(list)
    for replica in replicas(dashboard_url, apps, details):
        if replica.state in _STATES:
            found[replica.chainlet].append(replica)
    alive = _alive_nodes(dashboard_url)
    replaced = replacements(dashboard_url, apps)
    templates = {p.chainlet: p for p in reversed(recorded)}
    processes = []
    for chainlet in apps:
        template = templates.get(chainlet)
        if template is None:
            continue
        mine = sorted(found[chainlet], key=lambda r: (r.started_at, r.replica_id))
        count = max(0, replaced.get(chainlet, 0) - restarts_before.get(chainlet, 0))
        if not mine:  # every replica gone at once: Serve is placing new ones
            update = {"pid": None, "node": None, "state": "restarting", "restarts": count, "started_at": 0.0}
            processes.append(template.model_copy(update={"replica": 0, **update}))
            continue
        restarts = [0] * len(mine)
        for index in range(count):
            restarts[len(mine) - 1 - index % len(mine)] += 1
        for index, replica in enumerate(mine):
            state = _STATES[replica.state]
            if state == "ready" and replica.node_id not in alive:
                state = "restarting"
            processes.append(
                template.model_copy(
                    update={
                        "replica": index,
                        "pid": replica.pid,
                        "node": replica.node_ip,
                        "state": state,
                        "restarts": restarts[index],
                        "started_at": replica.started_at,
                    }
                )
            )
    return processes
