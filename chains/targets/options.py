"""What ``chains push`` was asked for, beyond the chain itself: one options type per target.

Every target takes :class:`PushOptions` (secrets, timeout, API key, CORS origins); each adds
what only it acts on, so a target's signature says what it reads::

    options = options_for("docker", entry_port=8000, base_image="python:3.11-slim")
    assert options == DockerOptions(entry_port=8000, base_image="python:3.11-slim")

The command line has one set of flags for every target: ``chains.targets.options_for`` keeps
of them what the target takes, and refuses the few that would mislead: ``--port`` on ray
(:attr:`PushOptions.refused`), ``--address`` anywhere but on ray (:attr:`PushOptions.owned`).
Which target takes which type is the target's own (``chains.targets.Target.options``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from chains.errors import ChainsUsageError

__all__ = [
    "ComposeOptions",
    "DockerOptions",
    "ExportOptions",
    "KubernetesOptions",
    "LocalOptions",
    "PushOptions",
    "RayOptions",
    "SwarmOptions",
    "TrussOptions",
    "build_options",
    "refuse_foreign",
    "widen",
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
    # Options only this type takes, which every other target refuses: name -> why.
    owned: ClassVar[Mapping[str, str]] = {}


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

    owned: ClassVar[Mapping[str, str]] = {"address": "--address names a Ray cluster: it is for --target ray"}
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

    owned: ClassVar[Mapping[str, str]] = {
        "model_urls": "--model-url is for the truss target: other targets wire the chainlets' URLs themselves"
    }


def _given(value: Any) -> bool:
    return value not in (None, False, (), {})


def _every_type(root: type[PushOptions] = PushOptions) -> Iterator[type[PushOptions]]:
    for sub in root.__subclasses__():
        yield sub
        yield from _every_type(sub)


def refuse_foreign(cls: type[PushOptions], given: Mapping[str, Any]) -> None:
    """Refuse an option of ``given`` that another options type owns and ``cls`` does not take
    (``--address`` on any target but ray); a clear error saying whose it is."""
    names = {f.name for f in dataclasses.fields(cls)}
    for other in _every_type():
        for name, why in other.owned.items():
            if name not in names and _given(given.get(name)):
                raise ChainsUsageError(why)


def build_options(cls: type[PushOptions], given: Mapping[str, Any]) -> PushOptions:
    """``cls`` built from ``given``, the options of every target: those it does not take are
    left out (None, empty or false ones always), or refused where ignoring them would mislead."""
    names = {f.name for f in dataclasses.fields(cls)}
    for name, value in given.items():
        if name not in names and _given(value) and name in cls.refused:
            raise ChainsUsageError(cls.refused[name])
    return cls(**{name: value for name, value in given.items() if name in names})


def widen(cls: type[PushOptions], options: PushOptions, target: str) -> PushOptions:
    """``options`` as type ``cls`` (target ``target``'s): as given when of that type, the
    common :class:`PushOptions` widened to it; another target's type is an error naming both."""
    if isinstance(options, cls):
        return options
    if type(options) is PushOptions:
        return cls(**{f.name: getattr(options, f.name) for f in dataclasses.fields(PushOptions)})
    raise ChainsUsageError(
        f"target {target!r} takes {cls.__name__}, not {type(options).__name__}; build them with "
        f"chains.targets.options_for({target!r}, ...)"
    )
