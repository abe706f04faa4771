"""Deploy targets: where ``chains push`` runs a chain, or what it writes for elsewhere.

A *running* target (``local``, ``docker``, ``swarm``, ``ray``) starts the chain and records
a :class:`~chains.targets.state.ChainState`; ``status``, ``logs``, ``call`` and ``stop`` then
work the same on every running target. An *export* target (``kubernetes``, ``compose``,
``truss``) writes what another system needs to run the chain
(``chains push FILE --target NAME --dry-run --out DIR``).

Each target is one :class:`Target`, defined as ``TARGET`` in its own module and registered
here by name and module: what it is (kind, options type, the settings it acts on, what it
can do) is asked of it, never decided elsewhere by its name::

    target("docker").capabilities.restart   # False: `chains restart` is refused, with a hint
"""

from __future__ import annotations

import enum
import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from chains.errors import ChainsUsageError
from chains.model import Chain
from chains.target_support import SettingGroup, settings_left_aside
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
    build_options,
    refuse_foreign,
    widen,
)
from chains.targets.state import ChainletProcess, ChainState, Pushed, same_process

__all__ = [
    "Capabilities",
    "ComposeOptions",
    "DockerOptions",
    "ExportOptions",
    "ExportTarget",
    "KubernetesOptions",
    "LocalOptions",
    "PushOptions",
    "RayOptions",
    "RunningTarget",
    "SettingGroup",
    "SwarmOptions",
    "Target",
    "TargetKind",
    "TrussOptions",
    "Wording",
    "cors_env",
    "export_target",
    "for_target",
    "ignored_settings",
    "is_alive",
    "options_for",
    "refuse_foreign_options",
    "register",
    "replica_shown",
    "running_target",
    "target",
    "target_names",
    "wording",
]


# A target's own options type (chains.targets.options), which its push or export takes.
O_contra = TypeVar("O_contra", bound=PushOptions, contravariant=True)


class RunningTarget(Protocol[O_contra]):
    """A target that runs the chain and can report on, show logs of, and stop it."""

    def push(self, chain: Chain, source_file: Path, options: O_contra) -> Pushed:
        """Start the chain, wait until it is ready and make it current; what ran before is
        left running, named in what this returns (``chains.deploy`` stops it)."""
        ...

    def alive(self, state: ChainState) -> bool: ...

    def logs(self, state: ChainState, chainlet: str | None, follow: bool, lines: int) -> Iterator[str]: ...

    def stop(self, state: ChainState, grace: float) -> None: ...


class ExportTarget(Protocol[O_contra]):
    """A target that writes files for another system to run the chain."""

    def export(self, chain: Chain, source_file: Path, options: O_contra) -> list[Path]: ...


class TargetKind(enum.Enum):
    """Whether a target runs the chain or writes files for another system to run it."""

    RUNNING = "running"
    EXPORT = "export"


@dataclass(frozen=True)
class Capabilities:
    """What a running target can do beyond push, status, logs and stop.

    >>> Capabilities(restart=True).patch
    False
    """

    # `chains restart` restarts its chainlets where they run, without a push.
    restart: bool = False
    # `chains push --watch` swaps a changed chainlet's code in the running deployment; without
    # it a change is pushed again (only the changed chainlets' images rebuilt).
    patch: bool = False
    # Each replica is a process of this machine, recorded by pid: whether it runs is asked of
    # the system. Otherwise the target records each replica's health in the state itself.
    process_liveness: bool = False
    # A push over a deployment of the same target updates that deployment in place (a rolling
    # update): there is no second deployment beside the first to stop.
    updates_in_place: bool = False


@dataclass(frozen=True)
class Wording:
    """How a running target names what runs a chain, in what ``status``, ``call`` and ``stop``
    print; these defaults are the local target's.

    >>> Wording(units="service(s)").units
    'service(s)'
    """

    units: str = "process(es)"  # what `chains stop` counts
    per_chainlet: bool = False  # it counts chainlets (one service each), not replicas
    gone: str = "supervisor gone"  # why a chain that does not run is stale, in short
    gone_detail: str = "its supervisor is gone and its processes are not supervised"


@dataclass(frozen=True)
class Target:
    """One target: its name, kind, options type, the settings it acts on, what it can do, and
    how to build it. Each target module defines one as ``TARGET``::

        TARGET = Target(
            name="local",
            kind=TargetKind.RUNNING,
            options=LocalOptions,
            acts_on=frozenset({SettingGroup.DATA_DIR, SettingGroup.PACKAGE_DIRS}),
            build=LocalTarget,
            capabilities=Capabilities(restart=True, patch=True, process_liveness=True),
        )
    """

    name: str
    kind: TargetKind
    options: type[PushOptions]
    acts_on: frozenset[SettingGroup]
    build: Callable[[], object]  # the target's implementation: a RunningTarget or an ExportTarget
    capabilities: Capabilities = Capabilities()
    wording: Wording = field(default_factory=Wording)

    def ignored_settings(self, chain: Chain) -> list[str]:
        """One line per chainlet setting of ``chain`` this target does not act on."""
        return settings_left_aside(chain, self.name, self.acts_on)


# name -> the module defining its TARGET. Imported on use: a target's dependencies (the docker
# SDK, say) are needed only by those who use it.
_MODULES: dict[str, str] = {}
_LOADED: dict[str, Target] = {}


def register(name: str, module: str) -> None:
    """Make target ``name`` known: ``module`` defines it as ``TARGET`` (imported on first use).

    >>> register("local", "chains.targets.local")
    """
    _MODULES[name] = module


for _name in ("local", "docker", "ray", "swarm", "kubernetes", "compose", "truss"):
    register(_name, f"chains.targets.{_name}")


def target_names() -> list[str]:
    """Every registered target's name, in the order they were registered."""
    return list(_MODULES)


def target(name: str) -> Target:
    """Target ``name``; a clear error naming the known ones for another name."""
    found = _LOADED.get(name)
    if found is not None:
        return found
    module = _MODULES.get(name)
    if module is None:
        raise ChainsUsageError(f"unknown target {name!r}; choose one of: {', '.join(_MODULES)}")
    loaded = importlib.import_module(module).TARGET
    if not isinstance(loaded, Target) or loaded.name != name:
        raise ChainsUsageError(f"module {module} does not define target {name!r} as TARGET")
    _LOADED[name] = loaded
    return loaded


def _of_kind(name: str, kind: TargetKind) -> object:
    found = target(name)
    if found.kind is not kind:
        hint = (
            "it only writes files: add --dry-run --out DIR"
            if found.kind is TargetKind.EXPORT
            else "it runs the chain"
        )
        raise ChainsUsageError(f"target {name!r} is an {found.kind.value} target; {hint}")
    return found.build()


def running_target(name: str) -> RunningTarget[Any]:
    """The implementation of running target ``name``."""
    built: RunningTarget[Any] = _of_kind(name, TargetKind.RUNNING)  # type: ignore[assignment]
    return built


def export_target(name: str) -> ExportTarget[Any]:
    """The implementation of export target ``name``."""
    built: ExportTarget[Any] = _of_kind(name, TargetKind.EXPORT)  # type: ignore[assignment]
    return built


def kind_of(name: str) -> TargetKind:
    """Whether target ``name`` runs chains or writes files."""
    return target(name).kind


def wording(state: ChainState) -> Wording:
    """The words of the target chain ``state`` runs on."""
    return target(state.target).wording


def is_alive(state: ChainState) -> bool:
    """Whether the chain ``state`` records still runs, as its target sees it."""
    return running_target(state.target).alive(state)


def replica_shown(state: ChainState, process: ChainletProcess) -> tuple[bool, str]:
    """Whether one replica of ``state`` runs, and its state as ``status`` and the dashboard
    show it: a replica recorded as running that does not is ``gone``."""
    if target(state.target).capabilities.process_liveness:
        running = same_process(process.pid, process.identity)
    else:
        running = process.state == "ready"  # the target keeps each replica's health in the state
    shown = process.state if running or process.state in ("failed", "stopped", "restarting") else "gone"
    return running, shown


def ignored_settings(chain: Chain, name: str) -> list[str]:
    """One line per chainlet setting of ``chain`` that target ``name`` does not act on.

    >>> for note in ignored_settings(chain, "local"):
    ...     print(note)
    """
    return target(name).ignored_settings(chain)


def options_for(name: str, **given: Any) -> PushOptions:
    """Target ``name``'s options from ``given``, the options of every target: those it does
    not take are left out (None, empty or false ones always), or refused where ignoring them
    would mislead (``--port`` on ray, ``--address`` off it)::

        options = options_for("docker", entry_port=8000, base_image="python:3.11-slim")
        assert options == DockerOptions(entry_port=8000, base_image="python:3.11-slim")
    """
    cls = target(name).options
    refuse_foreign(cls, given)
    return build_options(cls, given)


def refuse_foreign_options(name: str, **given: Any) -> None:
    """Refuse an option of ``given`` that only another target takes (``address`` off ray),
    with a clear error saying whose it is; what ``options_for`` checks first."""
    refuse_foreign(target(name).options, given)


def for_target(name: str, options: PushOptions) -> PushOptions:
    """``options`` as target ``name`` takes them: its own type as given, or the common
    :class:`PushOptions` widened to it; another target's type is an error naming both."""
    return widen(target(name).options, options, name)
