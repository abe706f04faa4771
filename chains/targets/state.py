"""Where running chains are recorded: ``$CHAINS_HOME`` (default ``./.chains``).

Layout of one chain::

    .chains/<name>/         both tagged with a CACHEDIR.TAG when a push creates them
        state.json      -> the active deployment's state (a symlink, swapped atomically)
        push.lock       held (flock) by the push or stop of the chain running now; holds its pid
        logs/<chainlet>[-<replica>].log
        deployments/<id>/
            deployment.json   what to run (with the chain token: readable by the owner only)
            state.json        what runs: pids, ports, URLs, restarts (written by the supervisor)
            supervisor.pid    the supervisor's pid and identity, to find it when state.json is lost
            generated/        the generated code of every chainlet
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import secrets
import shutil
import ssl
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeVar

import pydantic

from chains.errors import ChainsUsageError
from chains.tls import client_context

if TYPE_CHECKING:
    from chains.config import Compute
    from chains.model import Chain

T = TypeVar("T")

__all__ = [
    "MAX_NAME_LENGTH",
    "STOP_MARGIN_SEC",
    "ChainState",
    "ChainletProcess",
    "ContainerRecord",
    "Deployment",
    "DeploymentChainlet",
    "ImageRecord",
    "LocalRecord",
    "Pushed",
    "chain_dir",
    "chain_lock",
    "chains_home",
    "current_state",
    "forget",
    "home_error",
    "list_chains",
    "make_current",
    "new_deployment_dir",
    "pid_alive",
    "process_identity",
    "read_state",
    "same_process",
    "stop_grace",
    "write_private",
    "writing",
]

# What a stop waits beyond a deployment's own grace_sec before it kills the supervisor.
STOP_MARGIN_SEC = 5.0

# "gone": what ran it is lost (a swarm task whose node no longer answers) and nothing replaced
# it yet.
ProcessState = Literal["starting", "ready", "restarting", "failed", "stopped", "gone"]


def chains_home() -> Path:
    """The folder holding every chain's state: ``$CHAINS_HOME`` or ``.chains`` here."""
    return Path(os.environ.get("CHAINS_HOME") or ".chains").absolute()


# Well under a file name's 255 bytes, with room for what is added to it (log and lock names).
MAX_NAME_LENGTH = 63


def chain_dir(name: str) -> Path:
    """The chain's folder; a clear error for a name no folder can have."""
    if len(name) > MAX_NAME_LENGTH:
        raise ChainsUsageError(
            f"the chain name {name[:20]}... is {len(name)} characters long; at most {MAX_NAME_LENGTH} "
            "are allowed: pick a shorter --name"
        )
    if not name or "/" in name or name in (".", ".."):
        raise ChainsUsageError(f"{name!r} is not a chain name: use letters, digits, '_' and '-'")
    return chains_home() / name


class DeploymentChainlet(pydantic.BaseModel):
    """One chainlet of a deployment, as the supervisor starts it."""

    name: str
    directory: str
    replicas: int = 1
    env: dict[str, str] = pydantic.Field(default_factory=dict, repr=False)
    is_entrypoint: bool = False
    code_version: str = ""
    # Bytes, from ``Compute(memory=...)`` where the chainlet names it: the supervisor bounds
    # each process there (chains.targets.memory_limits); None leaves it unbounded.
    memory_limit: int | None = None

    @classmethod
    def all_of(
        cls,
        chain: Chain,
        generated_dir: Path,
        versions: Mapping[str, str],
        envs: Mapping[str, dict[str, str]],
    ) -> list[DeploymentChainlet]:
        """The chain's chainlets, each run from its generated folder with its environment.

        >>> chainlets = DeploymentChainlet.all_of(chain, generated, versions, envs)
        """
        return [
            cls(
                name=spec.name,
                directory=str(generated_dir / spec.name),
                replicas=spec.remote_config.compute.replicas,
                is_entrypoint=spec is chain.entrypoint,
                code_version=versions.get(spec.name, ""),
                env=envs[spec.name],
                memory_limit=_named_memory(spec.remote_config.compute),
            )
            for spec in chain.chainlets
        ]


def _named_memory(compute: Compute) -> int | None:
    # The default of 512Mi is the platforms' size; locally only a size the author named bounds.
    return compute.memory_bytes if "memory" in compute.model_fields_set else None


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
    # The running deployment of the chain whose entrypoint socket this one takes over (its
    # folder), so that both serve one accept queue while the old one drains.
    entry_socket_from: str | None = None
    chainlets: list[DeploymentChainlet]
    # How long the supervisor lets its chainlets drain on stop before it kills them: the
    # longest drain of its chainlets (CHAINS_GRACE_SEC), and a margin for the process to exit.
    grace_sec: float = 32.0
    python: str


class ContainerRecord(pydantic.BaseModel):
    """The docker target's part of one replica's state: its container and what it runs."""

    name: str
    image: str | None = None


class LocalRecord(pydantic.BaseModel):
    """The local target's part of a chain's state: the supervisor that runs the deployment."""

    supervisor_pid: int = 0
    supervisor_identity: str | None = None  # see process_identity()
    # The supervisor's reaper (chains/targets/reaper.py): it ends with the supervisor, and
    # `chains stop` ends it too should it outlive one.
    reaper_pid: int | None = None
    reaper_identity: str | None = None


class ImageRecord(pydantic.BaseModel):
    """The part of a target that builds an image per chainlet (docker, swarm): the default
    base image they were built on, which ``--watch`` generates and pushes again with."""

    base_image: str


class ChainletProcess(pydantic.BaseModel):
    """One running replica of a chainlet."""

    chainlet: str
    replica: int
    port: int
    url: str
    pid: int | None = None
    identity: str | None = None  # see process_identity(): which process ``pid`` was
    state: ProcessState = "starting"
    restarts: int = 0
    started_at: float = 0.0
    last_exit: int | None = None
    # Why it last went down, in words ("not answering its health check for 9s"), for status.
    reason: str | None = None
    log_lines_lost: int = 0  # lines its log could not take (a full disk), counted by the supervisor
    log: str = ""
    directory: str = ""
    code_version: str = ""
    container: ContainerRecord | None = None  # the docker target's part
    node: str | None = None  # targets of many machines (ray, swarm): the node it runs on

    @pydantic.model_validator(mode="before")
    @classmethod
    def _from_flat_fields(cls, data: object) -> object:
        # Written before the container had a record of its own: its name and image side by side.
        if isinstance(data, dict) and isinstance(data.get("container"), str):
            data = {**data, "container": {"name": data["container"], "image": data.get("image")}}
            data.pop("image", None)
        return data


class ChainState(pydantic.BaseModel):
    """What runs now: written by the supervisor, read by ``status``, ``call``, ``logs``, ``stop``."""

    chain: str
    deployment: str
    target: str = "local"
    source: str = ""
    entrypoint: str
    entrypoint_kind: str = "unary"
    entrypoint_url: str
    # The PEM certificate of the private authority that issued the entrypoint's certificate,
    # when one did (the ray target's proxy over HTTPS): what clients of the entrypoint verify
    # it with. None: the system's authorities (or plain HTTP).
    entrypoint_ca: str | None = None
    # Each target's own part, set by the targets it belongs to (None on the others).
    local: LocalRecord | None = None
    images: ImageRecord | None = None
    processes: list[ChainletProcess]
    updated_at: float = pydantic.Field(default_factory=time.time)
    grace_sec: float = 32.0  # the supervisor's grace (Deployment.grace_sec): what a stop waits for
    stopping: bool = False

    @pydantic.model_validator(mode="before")
    @classmethod
    def _from_flat_fields(cls, data: object) -> object:
        # A state written before each target had its record: its fields side by side.
        if not isinstance(data, dict):
            return data
        data = dict(data)
        pid, identity = data.pop("supervisor_pid", None), data.pop("supervisor_identity", None)
        if pid and "local" not in data:
            data["local"] = {"supervisor_pid": pid, "supervisor_identity": identity}
        base_image = data.pop("base_image", None)
        if base_image and "images" not in data:
            data["images"] = {"base_image": base_image}
        return data

    def entrypoint_context(self) -> ssl.SSLContext | None:
        """What a client verifies the entrypoint's certificate with: the authority recorded in
        ``entrypoint_ca``, and no other; None without one (the system's authorities).

        >>> client = httpx.AsyncClient(verify=state.entrypoint_context() or True)
        """
        if self.entrypoint_ca is None:
            return None
        return client_context(Path(self.entrypoint_ca), given_as=f"the entrypoint_ca of chain {self.chain!r}")

    def replicas(self, chainlet: str) -> list[ChainletProcess]:
        return [p for p in self.processes if p.chainlet == chainlet]

    def chainlet_names(self) -> list[str]:
        seen: dict[str, None] = {}
        for p in self.processes:
            seen.setdefault(p.chainlet, None)
        return list(seen)


def stop_grace(state: ChainState) -> float:
    """How long a stop of the deployment ``state`` records waits before it kills what is left:
    its own drain (``grace_sec``) and a margin. The one rule for every deployment a push
    replaces and for ``chains stop``."""
    return state.grace_sec + STOP_MARGIN_SEC


def _nothing() -> None:
    pass


@dataclass
class Pushed:
    """What a running target's push leaves: the new deployment, ready and current, and what
    ran before it, still running. ``chains.deploy`` stops those (one rule for every target,
    :func:`stop_grace`), forgets their folders when ``forget_others``, then calls ``settle``::

        pushed = running_target("local").push(chain, source, options)
        for old in pushed.replaced:
            running_target(old.target).stop(old, stop_grace(old))
    """

    state: ChainState
    replaced: list[ChainState] = field(default_factory=list)
    # Whether every deployment folder but the new one may go. Not when the target did not
    # look for deployments the state lost track of: one may still run from its folder.
    forget_others: bool = True
    settle: Callable[[], None] = _nothing  # tidying once the replaced ones are stopped


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, readable and writable by the owner only, atomically: the
    file holds the old text or the new, whole and on disk, even across a crash or a full disk."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _sync_dir(path.parent)


def _sync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def home_error(exc: OSError, what: str) -> ChainsUsageError | None:
    """A clear error for a state folder that cannot be written (full, read-only, not ours),
    or None when ``exc`` is another kind of failure."""
    reasons = {
        errno.ENOSPC: "the disk is full",
        errno.EDQUOT: "the disk quota is used up",
        errno.EROFS: "it is on a read-only file system",
        errno.EACCES: "permission denied",
        errno.EPERM: "permission denied",
    }
    reason = reasons.get(exc.errno or 0)
    if reason is None:
        return None
    where = exc.filename or chains_home()
    return ChainsUsageError(
        f"cannot {what} in {where}: {reason}; free space there, or set CHAINS_HOME to a writable folder"
    )


def writing(action: Callable[[], T], what: str) -> T:
    """Run ``action``; a state folder that cannot be written becomes a clear error saying
    ``what`` could not be done."""
    try:
        return action()
    except OSError as exc:
        error = home_error(exc, what)
        if error is None:
            raise
        raise error from None


def read_state(name: str) -> ChainState:
    """The state of chain ``name``; a clear error when there is no such chain."""
    path = chain_dir(name) / "state.json"
    try:
        return ChainState.model_validate_json(path.read_text())
    except FileNotFoundError:
        known = ", ".join(list_chains()) or "none"
        raise ChainsUsageError(
            f"no chain named {name!r} in {chains_home()} (chains there: {known}); start it with "
            "`chains push FILE`, or run this from the folder it was pushed from (or set CHAINS_HOME)"
        ) from None
    except (pydantic.ValidationError, json.JSONDecodeError) as exc:
        raise ChainsUsageError(f"the state of chain {name!r} at {path} is unreadable: {exc}") from None


def list_chains() -> list[str]:
    """The chains with a state file, or with deployment folders (whose state may be lost)."""
    home = chains_home()
    if not home.is_dir():
        return []
    found = []
    for folder in home.iterdir():
        deployments = folder / "deployments"
        has_deployments = deployments.is_dir() and any(deployments.iterdir())
        if (folder / "state.json").is_symlink() or (folder / "state.json").exists() or has_deployments:
            found.append(folder.name)
    return sorted(found)


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def process_identity(pid: int | None) -> str | None:
    """Which process ``pid`` is: the boot and the start time (in clock ticks since boot, field
    22 of ``/proc/PID/stat``). A pid reused by another process has another start time; None
    when there is no such process (or no ``/proc``)."""
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    # fields[0] is field 3 (the state): field 22 is fields[19].
    return f"{_boot_id()}:{fields[19]}"


def same_process(pid: int | None, identity: str | None) -> bool:
    """Whether ``pid`` is alive and still the process recorded with ``identity``.

    A state written before identities were recorded has none: then liveness is all there is.
    """
    if not pid_alive(pid):
        return False
    if identity is None:
        return True
    return process_identity(pid) == identity


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
    try:
        os.replace(tmp, link)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _sync_dir(home)


@contextlib.contextmanager
def chain_lock(name: str, wait: float) -> Iterator[None]:
    """Hold chain ``name``'s lock: one push or stop of a chain at a time.

    Waits up to ``wait`` seconds for another holder; then a clear error naming its pid. The
    lock is the kernel's (``flock``), so a holder that dies releases it.
    """
    path = chain_dir(name) / "push.lock"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        error = home_error(exc, f"lock chain {name!r}")
        if error is None:
            raise
        raise error from None
    try:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
                    raise ChainsUsageError(
                        f"another push or stop of chain {name!r} (pid {holder}) still runs after "
                        f"{wait:.0f}s of waiting; wait for it to finish, or stop that process"
                    ) from None
                time.sleep(0.1)
        with contextlib.suppress(OSError):  # the pid only informs a waiting push; a full disk may refuse it
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


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
