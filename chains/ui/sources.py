"""What the dashboard shows of a running chain, read from where chains keeps it: the state the
supervisor writes, the deployment ``chains push`` wrote (its generated ``chainlet.json``
descriptors give the graph without importing the chain's code), the logs and the trace store."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chains.deploy import find_state
from chains.errors import ChainsUsageError
from chains.graph import ChainGraph, Edge, Node
from chains.targets import is_alive, replica_shown, wording
from chains.targets.state import ChainState, Deployment, DeploymentChainlet, chain_dir

__all__ = ["ChainView", "DeploymentInfo", "graph_of", "read_deployment"]

DESCRIPTOR = "chainlet.json"  # written by the generator into each chainlet's folder


@dataclass(frozen=True)
class DeploymentInfo:
    """What the dashboard needs of one deployment: its graph and the entrypoint's API key."""

    id: str
    graph: ChainGraph
    api_key: str | None


def read_deployment(state: ChainState, api_key: str | None = None) -> DeploymentInfo:
    """The deployment ``state`` runs; a clear error when its files are gone or unreadable.

    The local and ray targets record the deployment (and the entrypoint's API key) in
    ``deployment.json``; docker and swarm record their replicas in the state only, so their
    graph is drawn from the state and the descriptors generated beside it, with ``api_key``
    (what ``chains ui --api-key`` was given) as the key.
    """
    folder = chain_dir(state.chain) / "deployments" / state.deployment
    recorded = folder / "deployment.json"
    if not recorded.exists() and (folder / "generated").is_dir():
        return DeploymentInfo(state.deployment, graph_of(_from_state(state, folder)), api_key or None)
    try:
        deployment = Deployment.model_validate_json(recorded.read_text())
    except (OSError, ValueError) as exc:
        raise ChainsUsageError(
            f"cannot read the deployment of chain {state.chain!r} in {folder} ({exc}); push the chain again"
        ) from None
    key = next((c.env.get("CHAINS_API_KEY") for c in deployment.chainlets if c.is_entrypoint), None)
    return DeploymentInfo(deployment.id, graph_of(deployment), key or api_key or None)


def _from_state(state: ChainState, folder: Path) -> Deployment:
    names = state.chainlet_names()
    return Deployment(
        chain=state.chain,
        id=state.deployment,
        target=state.target,
        source=state.source,
        entrypoint=state.entrypoint,
        python="",
        chainlets=[
            DeploymentChainlet(
                name=name,
                directory=str(folder / "generated" / name),  # where every target generates
                replicas=len(state.replicas(name)),
                is_entrypoint=name == state.entrypoint,
            )
            for name in names
        ],
    )


def graph_of(deployment: Deployment) -> ChainGraph:
    """The chain's graph from the descriptors the generator wrote (entrypoint first, as
    ``chains graph`` draws it); a chainlet whose descriptor is unreadable is drawn alone."""
    descriptors: dict[str, dict[str, Any]] = {}
    for chainlet in deployment.chainlets:
        try:
            descriptors[chainlet.name] = json.loads((Path(chainlet.directory) / DESCRIPTOR).read_text())
        except (OSError, ValueError):
            descriptors[chainlet.name] = {}
    order = sorted(deployment.chainlets, key=lambda c: not c.is_entrypoint)
    nodes = []
    edges = []
    for chainlet in order:
        described = descriptors[chainlet.name]
        compute = described.get("options", {}).get("compute", {})
        nodes.append(
            Node(
                name=chainlet.name,
                entrypoint=chainlet.is_entrypoint,
                endpoint=str(described.get("endpoint", {}).get("signature", "run_remote(...)")),
                concurrency=int(compute.get("concurrency", 0)),
                replicas=chainlet.replicas,
                gpu=compute.get("gpu"),
            )
        )
        for dep in described.get("dependencies", []):
            try:
                edge = Edge(
                    caller=chainlet.name,
                    callee=str(dep["chainlet"]),
                    param=str(dep["param"]),
                    retries=int(dep["retries"]),
                    timeout_sec=float(dep["timeout_sec"]),
                    concurrency_limit=dep.get("concurrency_limit"),
                )
            except (KeyError, TypeError, ValueError):
                continue  # a descriptor from another generator version: the call is left undrawn
            edges.append(edge)
    known = {node.name for node in nodes}
    return ChainGraph(deployment.chain, tuple(nodes), tuple(e for e in edges if e.callee in known))


class ChainView:
    """One chain as the dashboard polls it: its current state, and its deployment's
    graph and key, read again whenever a push replaces the deployment."""

    def __init__(self, name: str, api_key: str | None = None) -> None:
        self.name = name
        self._api_key = api_key
        self.state = find_state(name)
        self.deployment = read_deployment(self.state, api_key)

    def refresh(self) -> ChainState:
        """The state now; the deployment too when it changed."""
        state = find_state(self.name)
        if state.deployment != self.deployment.id:
            self.deployment = read_deployment(state, self._api_key)
        self.state = state
        return state

    def overview(self) -> dict[str, Any]:
        """The chain's state as the page shows it, per replica."""
        state = self.state
        alive = is_alive(state)  # first: a target may refresh the processes as it looks
        processes = []
        for p in state.processes:
            _, shown = replica_shown(state, p)
            processes.append(
                {
                    "chainlet": p.chainlet,
                    "replica": p.replica,
                    "url": p.url,
                    "pid": p.pid,
                    "node": p.node,
                    "state": shown,
                    "restarts": p.restarts,
                    "started_at": p.started_at,
                    "last_exit": p.last_exit,
                    "reason": p.reason,  # why it last went down, as `chains status` says it
                }
            )
        return {
            "chain": state.chain,
            "target": state.target,
            "deployment": state.deployment,
            "entrypoint": state.entrypoint,
            "entrypoint_kind": state.entrypoint_kind,
            "entrypoint_url": state.entrypoint_url,
            "supervisor_alive": alive,
            "not_running": wording(state).gone_detail,  # the banner's words when it is not alive
            "updated_at": state.updated_at,
            "processes": processes,
        }
