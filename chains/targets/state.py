"""Where running chains are recorded: ``$CHAINS_HOME`` (default ``./.chains``).

Layout of one chain::

    .chains/<name>/         both tagged with a CACHEDIR.TAG when a push creates them
        state.json      -> the active deployment's state (a symlink, swapped atomically)
        logs/<chainlet>[-<replica>].log
        deployments/<id>/
            deployment.json   what to run (with the chain token: readable by the owner only)
            state.json        what runs: pids, ports, URLs, restarts (written by the supervisor)
            generated/        the generated code of every chainlet
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pydantic

from chains.errors import ChainsUsageError

__all__ = [
    "ChainState",
    "ChainletProcess",
    "Deployment",
    "DeploymentChainlet",
    "chain_dir",
    "chains_home",
    "current_state",
    "forget",
    "list_chains",
    "make_current",
    "new_deployment_dir",
    "pid_alive",
    "read_state",
    "write_private",
]

ProcessState = Literal["starting", "ready", "restarting", "failed", "stopped"]


def chains_home() -> Path:
    """The folder holding every chain's state: ``$CHAINS_HOME`` or ``.chains`` here."""
    return Path(os.environ.get("CHAINS_HOME") or ".chains").absolute()


def chain_dir(name: str) -> Path:
    return chains_home() / name


class DeploymentChainlet(pydantic.BaseModel):
    """One chainlet of a deployment, as the supervisor starts it."""

    name: str
    directory: str
    replicas: int = 1
    env: dict[str, str] = pydantic.Field(default_factory=dict, repr=False)
    is_entrypoint: bool = False
    code_version: str = ""


class Deployment(pydantic.BaseModel):
    """What a supervisor runs; written by ``chains push`` before it starts the supervisor."""

    chain: str
    id: str
    target: str = "local"
    source: str
    entrypoint: str
    entrypoint_kind: str = "unary"
    host: str = "127.0.0.1"
    entry_port: int | None = None
    chainlets: list[DeploymentChainlet]
    grace_sec: float = 10.0
    python: str


class ChainletProcess(pydantic.BaseModel):
    """One running replica of a chainlet."""

    chainlet: str
    replica: int
    port: int
    url: str
    pid: int | None = None
    state: ProcessState = "starting"
    restarts: int = 0
    started_at: float = 0.0
    last_exit: int | None = None
    log: str = ""
    directory: str = ""
    code_version: str = ""
    container: str | None = None  # docker target: the container's name
    image: str | None = None  # docker target: the image it runs


class ChainState(pydantic.BaseModel):
    """What runs now: written by the supervisor, read by ``status``, ``call``, ``logs``, ``stop``."""

    chain: str
    deployment: str
    target: str = "local"
    source: str = ""
    entrypoint: str
    entrypoint_kind: str = "unary"
    entrypoint_url: str
    supervisor_pid: int = 0  # local target
    base_image: str | None = None  # docker target: the default base image, for --watch's re-pushes
    processes: list[ChainletProcess]
    updated_at: float = pydantic.Field(default_factory=time.time)
    stopping: bool = False

    def replicas(self, chainlet: str) -> list[ChainletProcess]:
        return [p for p in self.processes if p.chainlet == chainlet]

    def chainlet_names(self) -> list[str]:
        seen: dict[str, None] = {}
        for p in self.processes:
            seen.setdefault(p.chainlet, None)
        return list(seen)

    @property
    def alive(self) -> bool:
        """Whether the chain still runs (asks its target)."""
        from chains.targets import running_target

        return running_target(self.target).alive(self)


def write_private(path: Path, text: str) -> None:
    """Write ``text`` atomically to ``path``, readable and writable by the owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)


def read_state(name: str) -> ChainState:
    """The state of chain ``name``; a clear error when there is no such chain."""
    path = chain_dir(name) / "state.json"
    try:
        return ChainState.model_validate_json(path.read_text())
    except FileNotFoundError:
        known = ", ".join(list_chains()) or "none"
        raise ChainsUsageError(
            f"no chain named {name!r} in {chains_home()} (chains there: {known}); "
            "start it with `chains push FILE`"
        ) from None
    except (pydantic.ValidationError, json.JSONDecodeError) as exc:
        raise ChainsUsageError(f"the state of chain {name!r} at {path} is unreadable: {exc}") from None


def list_chains() -> list[str]:
    home = chains_home()
    if not home.is_dir():
        return []
    return sorted(p.name for p in home.iterdir() if (p / "state.json").exists())


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped) counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def current_state(name: str) -> ChainState | None:
    """The state of chain ``name``, or None when there is none (or it is unreadable)."""
    try:
        return read_state(name)
    except ChainsUsageError:
        return None


def new_deployment_dir(name: str) -> Path:
    """A fresh folder for a new deployment of chain ``name``."""
    folder = chain_dir(name) / "deployments" / (time.strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3))
    created = [f for f in (chains_home(), chain_dir(name)) if not f.exists()]
    folder.mkdir(parents=True)
    for made in created:
        _tag_as_cache(made)
    return folder


# The Cache Directory Tagging convention (https://bford.info/cachedir/). The generator never
# copies a folder so tagged into a deployment, whatever its name: a state folder inside the
# chain's own folder would otherwise be copied into every deployment, each holding the last.
# Only folders chains creates are tagged (CHAINS_HOME may name the user's own folder, which
# backup tools must not skip); each chain's folder too, for when the state folder is an old
# one or holds the source.
_CACHEDIR_TAG = """Signature: 8a477f597d28d172789f06886806bc55
# This file is created by chains: this folder holds the state of running chains (logs,
# deployments, generated code), not source. See https://bford.info/cachedir/
"""


def _tag_as_cache(folder: Path) -> None:
    (folder / "CACHEDIR.TAG").write_text(_CACHEDIR_TAG, encoding="ascii")


def make_current(name: str, deploy_dir: Path) -> None:
    """Point the chain's ``state.json`` at ``deploy_dir``'s, atomically (readers never see
    a missing or half-written state)."""
    home = chain_dir(name)
    link = home / "state.json"
    tmp = home / f".state.json.{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(deploy_dir.relative_to(home) / "state.json")
    os.replace(tmp, link)


def forget(name: str, keep: str | None = None) -> None:
    """Remove the chain's state and every deployment folder but ``keep``; logs stay."""
    home = chain_dir(name)
    if keep is None:
        (home / "state.json").unlink(missing_ok=True)
    deployments = home / "deployments"
    if deployments.is_dir():
        for folder in deployments.iterdir():
            if folder.name != keep:
                shutil.rmtree(folder, ignore_errors=True)


def iter_logs(name: str) -> Iterator[Path]:
    logs = chain_dir(name) / "logs"
    if logs.is_dir():
        yield from sorted(logs.glob("*.log"))
