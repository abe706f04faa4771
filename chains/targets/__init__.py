"""Deploy targets: where ``chains push`` runs a chain, or what it writes for elsewhere.

A *running* target (``local``, ``docker``) starts the chain and records a
:class:`~chains.targets.state.ChainState`; ``status``, ``logs``, ``call`` and ``stop``
then work the same on every running target. An *export* target (``kubernetes``,
``compose``, ``truss``) writes what another system needs to run the chain
(``chains push FILE --target NAME --dry-run --out DIR``).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from chains.errors import ChainsUsageError
from chains.model import Chain
from chains.targets.environment import cors_env
from chains.targets.options import (
    ComposeOptions,
    DockerOptions,
    ExportOptions,
    KubernetesOptions,
    LocalOptions,
    PushOptions,
    RayOptions,
    SwarmOptions,
    TrussOptions,
    for_target,
    options_for,
)
from chains.targets.state import ChainState

__all__ = [
    "TARGETS",
    "ComposeOptions",
    "DockerOptions",
    "ExportOptions",
    "ExportTarget",
    "KubernetesOptions",
    "LocalOptions",
    "PushOptions",
    "RayOptions",
    "RunningTarget",
    "SwarmOptions",
    "TrussOptions",
    "Wording",
    "cors_env",
    "export_target",
    "for_target",
    "is_alive",
    "options_for",
    "running_target",
    "wording",
]


# A target's own options type (chains.targets.options), which its push or export takes.
O_contra = TypeVar("O_contra", bound=PushOptions, contravariant=True)


class RunningTarget(Protocol[O_contra]):
    """A target that runs the chain and can report on, show logs of, and stop it."""

    def push(self, chain: Chain, source_file: Path, options: O_contra) -> ChainState: ...

    def alive(self, state: ChainState) -> bool: ...

    def logs(self, state: ChainState, chainlet: str | None, follow: bool, lines: int) -> Iterator[str]: ...

    def stop(self, state: ChainState, grace: float) -> None: ...


class ExportTarget(Protocol[O_contra]):
    """A target that writes files for another system to run the chain."""

    def export(self, chain: Chain, source_file: Path, options: O_contra) -> list[Path]: ...


# name -> (module, class, kind). Imported on use: a target's dependencies (the docker SDK,
# say) are needed only by those who use it.
TARGETS: dict[str, tuple[str, str, str]] = {
    "local": ("chains.targets.local", "LocalTarget", "running"),
    "docker": ("chains.targets.docker", "DockerTarget", "running"),
    "ray": ("chains.targets.ray", "RayTarget", "running"),
    "swarm": ("chains.targets.swarm", "SwarmTarget", "running"),
    "kubernetes": ("chains.targets.kubernetes", "KubernetesTarget", "export"),
    "compose": ("chains.targets.compose", "ComposeTarget", "export"),
    "truss": ("chains.targets.truss", "TrussTarget", "export"),
}


def _load(name: str, kind: str) -> object:
    entry = TARGETS.get(name)
    if entry is None:
        raise ChainsUsageError(f"unknown target {name!r}; choose one of: {', '.join(TARGETS)}")
    module, cls, target_kind = entry
    if target_kind != kind:
        hint = (
            "it only writes files: add --dry-run --out DIR"
            if target_kind == "export"
            else "it runs the chain"
        )
        raise ChainsUsageError(f"target {name!r} is an {target_kind} target; {hint}")
    return getattr(importlib.import_module(module), cls)()


def running_target(name: str) -> RunningTarget[Any]:
    target: RunningTarget[Any] = _load(name, "running")  # type: ignore[assignment]
    return target


@dataclass(frozen=True)
class Wording:
    """How a running target names what runs a chain, in what ``status``, ``call`` and ``stop``
    print. A target may set its own as a ``wording`` attribute; these are the local target's.

    >>> Wording(units="service(s)").units
    'service(s)'
    """

    units: str = "process(es)"  # what `chains stop` counts
    per_chainlet: bool = False  # it counts chainlets (one service each), not replicas
    gone: str = "supervisor gone"  # why a chain that does not run is stale, in short
    gone_detail: str = "its supervisor is gone and its processes are not supervised"


def wording(state: ChainState) -> Wording:
    """The words of the target chain ``state`` runs on."""
    found = getattr(running_target(state.target), "wording", None)
    return found if isinstance(found, Wording) else Wording()


def is_alive(state: ChainState) -> bool:
    """Whether the chain ``state`` records still runs, as its target sees it."""
    return running_target(state.target).alive(state)


def export_target(name: str) -> ExportTarget[Any]:
    target: ExportTarget[Any] = _load(name, "export")  # type: ignore[assignment]
    return target


def kind_of(name: str) -> str:
    entry = TARGETS.get(name)
    if entry is None:
        raise ChainsUsageError(f"unknown target {name!r}; choose one of: {', '.join(TARGETS)}")
    return entry[2]
