"""What ``chains push`` was asked for, beyond the chain itself: one options type per target.

Every target takes :class:`PushOptions` (secrets, timeout, API key, CORS origins); each adds
what only it acts on, so a target's signature says what it reads::

    options = options_for("docker", entry_port=8000, base_image="python:3.11-slim")
    assert options == DockerOptions(entry_port=8000, base_image="python:3.11-slim")

The command line has one set of flags for every target: :func:`options_for` keeps of them
what the target takes, and refuses the few that would mislead (``--port`` on ray).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from chains.errors import ChainsUsageError

__all__ = [
    "OPTIONS",
    "ComposeOptions",
    "DockerOptions",
    "ExportOptions",
    "KubernetesOptions",
    "LocalOptions",
    "PushOptions",
    "RayOptions",
    "SwarmOptions",
    "TrussOptions",
    "for_target",
    "options_for",
]


@dataclass(frozen=True)
class PushOptions:
    """What every target takes, beyond the chain itself."""

    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)
    timeout: float = 60.0
    api_key: str | None = field(default=None, repr=False)  # required by the entrypoint when set
    cors_origins: tuple[str, ...] = ()  # more origins whose pages may call the entrypoint

    # Options given for every target that this one must refuse rather than ignore: name -> why.
    refused: ClassVar[Mapping[str, str]] = {}


@dataclass(frozen=True)
class LocalOptions(PushOptions):
    """The local target: the entrypoint's port on 127.0.0.1 (None: kept across pushes, or any)."""

    entry_port: int | None = None


@dataclass(frozen=True)
class DockerOptions(PushOptions):
    """The docker target: the entrypoint's published port, and the image chainlets build on."""

    entry_port: int | None = None
    base_image: str | None = None


@dataclass(frozen=True)
class SwarmOptions(PushOptions):
    """The swarm target: the entrypoint's published port, and the image chainlets build on."""

    entry_port: int | None = None
    base_image: str | None = None


@dataclass(frozen=True)
class RayOptions(PushOptions):
    """The ray target: the cluster (``ray://HEAD:10001``, ``HEAD:PORT`` or ``auto``)."""

    address: str | None = None

    refused: ClassVar[Mapping[str, str]] = {
        "entry_port": (
            "--port does not apply to the ray target: Serve's proxy serves the entrypoint, "
            "at <proxy>/<chain>/<entrypoint>"
        )
    }


@dataclass(frozen=True)
class ExportOptions(PushOptions):
    """What every export target takes: where to write, and the image chainlets build on."""

    out_dir: Path | None = None
    base_image: str | None = None
    apply: bool = False  # only the kubernetes target applies what it wrote; others say so


@dataclass(frozen=True)
class KubernetesOptions(ExportOptions):
    """The kubernetes export: where images are pushed (e.g. ``registry.example/team``)."""

    registry: str | None = None


@dataclass(frozen=True)
class ComposeOptions(ExportOptions):
    """The compose export: where images are pushed, and the entrypoint's published port."""

    registry: str | None = None
    entry_port: int | None = None


@dataclass(frozen=True)
class TrussOptions(ExportOptions):
    """The truss export: each chainlet's model's predict URL (chainlet -> URL)."""

    model_urls: Mapping[str, str] = field(default_factory=dict)


OPTIONS: dict[str, type[PushOptions]] = {
    "local": LocalOptions,
    "docker": DockerOptions,
    "ray": RayOptions,
    "swarm": SwarmOptions,
    "kubernetes": KubernetesOptions,
    "compose": ComposeOptions,
    "truss": TrussOptions,
}


def _options_type(target: str) -> type[PushOptions]:
    cls = OPTIONS.get(target)
    if cls is None:
        raise ChainsUsageError(f"unknown target {target!r}; choose one of: {', '.join(OPTIONS)}")
    return cls


def options_for(target: str, **given: Any) -> PushOptions:
    """Target ``target``'s options from ``given``, the options of every target: those it does
    not take are left out (None, empty or false ones always), or refused where ignoring them
    would mislead."""
    cls = _options_type(target)
    names = {f.name for f in dataclasses.fields(cls)}
    for name, value in given.items():
        if name not in names and value not in (None, False, (), {}) and name in cls.refused:
            raise ChainsUsageError(cls.refused[name])
    return cls(**{name: value for name, value in given.items() if name in names})


def for_target(target: str, options: PushOptions) -> PushOptions:
    """``options`` as target ``target`` takes them: its own type as given, or the common
    :class:`PushOptions` widened to it; another target's type is an error naming both."""
    cls = _options_type(target)
    if isinstance(options, cls):
        return options
    if type(options) is PushOptions:
        return cls(**{f.name: getattr(options, f.name) for f in dataclasses.fields(PushOptions)})
    raise ChainsUsageError(
        f"target {target!r} takes {cls.__name__}, not {type(options).__name__}; build them with "
        f"chains.targets.options_for({target!r}, ...)"
    )
