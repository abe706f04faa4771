"""Which chainlet settings exist that some target leaves aside, and naming the ones it does.

Truss Chains files carry settings that only Baseten acts on (model caches, instance types,
health-check thresholds, ...). They are accepted everywhere, written by the Truss export,
and named once by ``chains check`` and ``chains push`` on any other target, so that nothing
is dropped without a word. Each setting belongs to a :class:`SettingGroup`; a target says
which groups it acts on (``chains.targets.Target.acts_on``)::

    for note in settings_left_aside(chain, "local", frozenset({SettingGroup.DATA_DIR})):
        print(note)
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from chains.config import BasetenImage, CustomImage, RemoteConfig
from chains.model import Chain

__all__ = ["SETTINGS", "Setting", "SettingGroup", "settings_left_aside"]


class SettingGroup(enum.Enum):
    """Settings that the same targets act on."""

    # Baseten's own: only an export for Baseten writes them.
    BASETEN = "baseten"
    # Shell commands run while the environment is built: by targets that build an image.
    BUILD_COMMANDS = "build_commands"
    # A folder of data read by its path where the chainlet runs.
    DATA_DIR = "data_dir"
    # Folders of packages put on the chainlet's import path.
    PACKAGE_DIRS = "package_dirs"


@dataclass(frozen=True)
class Setting:
    """One configuration setting: how to spot it, how to name it, and its group."""

    label: str
    is_set: Callable[[RemoteConfig], bool]
    group: SettingGroup
    instead: str = "ignored"


_BASETEN = SettingGroup.BASETEN

SETTINGS: tuple[Setting, ...] = (
    Setting(
        "DockerImage(base_image=BasetenImage...)",
        lambda c: isinstance(c.docker_image.base_image, BasetenImage),
        _BASETEN,
        "the target's default base image is used",
    ),
    Setting(
        "CustomImage(docker_auth=...)",
        lambda c: (
            isinstance(c.docker_image.base_image, CustomImage)
            and c.docker_image.base_image.docker_auth is not None
        ),
        _BASETEN,
        "log the engine in to the registry yourself",
    ),
    Setting(
        "DockerImage(truss_server_version_override=...)",
        lambda c: bool(c.docker_image.truss_server_version_override),
        _BASETEN,
    ),
    Setting(
        "RemoteConfig(build_commands=...)",
        lambda c: bool(c.build_commands),
        SettingGroup.BUILD_COMMANDS,
        "run them in the environment yourself",
    ),
    Setting(
        "DockerImage(data_dir=...)",
        lambda c: bool(c.docker_image.data_dir),
        SettingGroup.DATA_DIR,
        "not copied; read the folder by its path",
    ),
    Setting(
        "DockerImage(external_package_dirs=...)",
        lambda c: bool(c.docker_image.external_package_dirs),
        SettingGroup.PACKAGE_DIRS,
    ),
    Setting("Compute(instance_type=...)", lambda c: bool(c.compute.instance_type), _BASETEN),
    Setting("Assets(cached=...)", lambda c: bool(c.assets.cached), _BASETEN),
    Setting("Assets(external_data=...)", lambda c: bool(c.assets.external_data), _BASETEN),
    Setting("Assets(weights=...)", lambda c: bool(c.assets.weights), _BASETEN),
    Setting(
        "ChainletOptions(health_checks=...)",
        lambda c: c.options.health_checks is not None,
        _BASETEN,
    ),
    Setting("ChainletOptions(transport=...)", lambda c: c.options.transport is not None, _BASETEN),
    Setting(
        "ChainletOptions(enable_b10_tracing=True)",
        lambda c: c.options.enable_b10_tracing,
        _BASETEN,
    ),
    Setting(
        "ChainletOptions(streaming_read_timeout=...)",
        lambda c: c.options.streaming_read_timeout != 60,
        _BASETEN,
        "streams between chainlets are bounded by depends(timeout_sec=...)",
    ),
)


# What the truss export writes for Baseten: the notes of other targets point there.
_WRITTEN_FOR_BASETEN = frozenset({SettingGroup.BASETEN, SettingGroup.BUILD_COMMANDS})


def settings_left_aside(chain: Chain, target: str, acts_on: frozenset[SettingGroup]) -> list[str]:
    """One line per chainlet setting of ``chain`` outside the groups ``acts_on`` of target
    ``target``, naming what it does instead."""
    notes = []
    for spec in chain.chainlets:
        for setting in SETTINGS:
            if setting.group not in acts_on and setting.is_set(spec.remote_config):
                kept = " (the truss export writes it)" if setting.group in _WRITTEN_FOR_BASETEN else ""
                notes.append(
                    f"{spec.name}: {setting.label} is not used on target {target}: {setting.instead}{kept}"
                )
    return notes
