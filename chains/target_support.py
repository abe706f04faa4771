"""Which of a chainlet's settings a target acts on, and naming the ones it leaves aside.

Truss Chains files carry settings that only Baseten acts on (model caches, instance types,
health-check thresholds, ...). They are accepted everywhere, written by the Truss export,
and named once by ``chains check`` and ``chains push`` on any other target, so that nothing
is dropped without a word::

    for note in ignored_settings(chain, "local"):
        print(note)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from chains.config import BasetenImage, CustomImage, RemoteConfig
from chains.model import Chain

__all__ = ["IMAGE_TARGETS", "SETTINGS", "Setting", "ignored_settings"]

# Targets that build an image per chainlet from its generated Dockerfile.
IMAGE_TARGETS = frozenset({"docker", "kubernetes", "compose", "swarm"})
_ALL = frozenset({"local", "ray", "truss", *IMAGE_TARGETS})
_TRUSS_ONLY = frozenset({"truss"})


@dataclass(frozen=True)
class Setting:
    """One configuration setting: how to spot it, how to name it, and who acts on it."""

    label: str
    is_set: Callable[[RemoteConfig], bool]
    honoured_by: frozenset[str]
    instead: str = "ignored"


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "DockerImage(base_image=BasetenImage...)",
        lambda c: isinstance(c.docker_image.base_image, BasetenImage),
        _TRUSS_ONLY,
        "the target's default base image is used",
    ),
    Setting(
        "CustomImage(docker_auth=...)",
        lambda c: (
            isinstance(c.docker_image.base_image, CustomImage)
            and c.docker_image.base_image.docker_auth is not None
        ),
        _TRUSS_ONLY,
        "log the engine in to the registry yourself",
    ),
    Setting(
        "DockerImage(truss_server_version_override=...)",
        lambda c: bool(c.docker_image.truss_server_version_override),
        _TRUSS_ONLY,
    ),
    Setting(
        "RemoteConfig(build_commands=...)",
        lambda c: bool(c.build_commands),
        _TRUSS_ONLY | IMAGE_TARGETS,
        "run them in the environment yourself",
    ),
    Setting(
        "DockerImage(data_dir=...)",
        lambda c: bool(c.docker_image.data_dir),
        frozenset({"local", "ray", *IMAGE_TARGETS}),
        "not copied; read the folder by its path",
    ),
    Setting(
        "DockerImage(external_package_dirs=...)",
        lambda c: bool(c.docker_image.external_package_dirs),
        _ALL,
    ),
    Setting("Compute(instance_type=...)", lambda c: bool(c.compute.instance_type), _TRUSS_ONLY),
    Setting("Assets(cached=...)", lambda c: bool(c.assets.cached), _TRUSS_ONLY),
    Setting("Assets(external_data=...)", lambda c: bool(c.assets.external_data), _TRUSS_ONLY),
    Setting("Assets(weights=...)", lambda c: bool(c.assets.weights), _TRUSS_ONLY),
    Setting("ChainletOptions(health_checks=...)", lambda c: c.options.health_checks is not None, _TRUSS_ONLY),
    Setting("ChainletOptions(transport=...)", lambda c: c.options.transport is not None, _TRUSS_ONLY),
    Setting("ChainletOptions(enable_b10_tracing=True)", lambda c: c.options.enable_b10_tracing, _TRUSS_ONLY),
    Setting(
        "ChainletOptions(streaming_read_timeout=...)",
        lambda c: c.options.streaming_read_timeout != 60,
        _TRUSS_ONLY,
        "streams between chainlets are bounded by depends(timeout_sec=...)",
    ),
)


def ignored_settings(chain: Chain, target: str) -> list[str]:
    """One line per chainlet setting that ``target`` does not act on, naming what it does."""
    notes = []
    for spec in chain.chainlets:
        for setting in SETTINGS:
            if target not in setting.honoured_by and setting.is_set(spec.remote_config):
                kept = " (the truss export writes it)" if "truss" in setting.honoured_by else ""
                notes.append(
                    f"{spec.name}: {setting.label} is not used on target {target}: {setting.instead}{kept}"
                )
    return notes
