"""The local target: every chainlet as its own process on 127.0.0.1, under a supervisor."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import closing
from pathlib import Path
from typing import TypeVar

from chains import progress
from chains.errors import ChainsRuntimeError
from chains.model import Chain
from chains.progress import Board, Stage
from chains.source_map import SOURCE_DIR_ENV, condense, drop_cancellations, find_cause, to_user_files
from chains.targets import Capabilities, SettingGroup, Target, TargetKind, is_alive
from chains.targets.environment import chainlet_environment
from chains.targets.exits import kill_group
from chains.targets.job_env import job_environment
from chains.targets.log_writer import owner_only
from chains.targets.logs import follow_files
from chains.targets.options import LocalOptions
from chains.targets.ports import check_port_free, port_free, port_of
from chains.targets.push_sequence import push_sequence
from chains.targets.state import (
    ChainState,
    Deployment,
    DeploymentChainlet,
    LocalRecord,
    Pushed,
    chain_dir,
    iter_logs,
    process_identity,
    same_process,
    write_private,
    writing,
)
from chains.targets.supervisor import PID_FILE, control_socket_path
from chains.targets.wiring import drain_grace
from chains.tracing import STORE_ENV
from chains.tracing.store import store_path

__all__ = ["LocalTarget", "control", "running_deployments"]

_LOG_TAIL_LINES = 30
# A chainlet drains for its CHAINS_GRACE_SEC; the supervisor gives it this much more to exit
# (and whoever stops the supervisor STOP_MARGIN_SEC more again): a drain is never cut short
# by a kill from the level above.
_EXIT_MARGIN_SEC = 2.0

T = TypeVar("T")


class LocalTarget:
    """Starts, replaces and stops local deployments of a chain."""

    def __init__(self, python: str | None = None) -> None:
        self.python = python or sys.executable

    def push(self, chain: Chain, source_file: Path, options: LocalOptions) -> Pushed:
        """Start ``chain`` and wait until every chainlet is ready; replaces a running one.

        The new deployment becomes current only once it is ready, then the previous one
        (if any) is stopped: callers of the entrypoint see no gap. Any other deployment of
        the chain that still runs though the state file lost track of it (truncated or
        deleted) is replaced as well.
        """
        launch = _LocalLaunch(self, chain, source_file, options)
        return push_sequence(chain.name, launch, find_running=running_deployments)

    def alive(self, state: ChainState) -> bool:
        if _supervisor_runs(state):
            return True
        # A killed supervisor leaves its control socket: whoever finds it gone removes it.
        _remove_stale_socket(chain_dir(state.chain) / "deployments" / state.deployment)
        return False

    def logs(self, state: ChainState, chainlet: str | None, follow: bool, lines: int) -> Iterator[str]:
        paths = list(iter_logs(state.chain))
        if chainlet is not None:
            paths = [p for p in paths if p.stem == chainlet or p.stem.startswith(f"{chainlet}-")]
        if not state.source:
            return follow_files(paths, lines, follow)
        source_dir = Path(state.source).parent
        return (to_user_files(line, source_dir) for line in follow_files(paths, lines, follow))

    def stop(self, state: ChainState, grace: float) -> None:
        """Stop one deployment: its supervisor drains the chainlets; stragglers are killed.

        Every pid is checked to be the process the state recorded before it is signalled: a
        pid the system gave to another process since is left alone.
        """
        if state.local is not None:
            _terminate(state.local.supervisor_pid, grace, state.local.supervisor_identity)
            if state.local.reaper_pid:  # it ends when the supervisor does: this is for one that did not
                _terminate(state.local.reaper_pid, 1.0, state.local.reaper_identity)
        for process in state.processes:
            if process.pid:
                _terminate(process.pid, 1.0, process.identity)
                _end_group(process.pid, process.identity)
        _remove_stale_socket(chain_dir(state.chain) / "deployments" / state.deployment)

    def _start_supervisor(self, deploy_dir: Path) -> subprocess.Popen[bytes]:
        log = open(deploy_dir / "supervisor.log", "ab", opener=owner_only)  # noqa: SIM115 - handed to the child
        try:
            # A session of its own: the chain outlives the terminal that pushed it.
            return subprocess.Popen(
                [self.python, "-m", "chains.targets.supervisor", str(deploy_dir)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=deploy_dir,
            )
        finally:
            log.close()


class _LocalLaunch:
    """One push of the local target: the deployment's supervisor, started and awaited."""

    def __init__(self, target: LocalTarget, chain: Chain, source_file: Path, options: LocalOptions) -> None:
        self.target = target
        self.chain = chain
        self.source_file = source_file
        self.options = options
        self.supervisor: subprocess.Popen[bytes] | None = None

    def start(self, deploy_dir: Path, previous: ChainState | None, token: str) -> ChainState:
        from chains_codegen import generate  # the generator is only needed when pushing

        chain, source_file, options = self.chain, self.source_file, self.options
        home = chain_dir(chain.name)

        generated_dir = deploy_dir / "generated"
        result = writing(lambda: generate(chain, source_file, generated_dir), "write the generated code")
        versions = {name: c.code_version for name, c in result.chainlets.items()}
        entry_port, entry_socket_from = _entry_port(chain.name, options.entry_port, previous)
        # The chain's recent traces, kept on this machine (CHAINS_TRACE_STORE=off in push's
        # environment turns that off; OTEL_EXPORTER_OTLP_ENDPOINT adds a collector).
        traces = {STORE_ENV: os.environ.get(STORE_ENV) or str(store_path(home))}
        jobs = job_environment(home)  # the entrypoint's async calls (docs/jobs.md)
        source = {SOURCE_DIR_ENV: str(source_file.parent.absolute())}
        envs = {
            spec.name: {
                **chainlet_environment(chain, spec, token, options, "local"),
                **traces,
                **source,
                **(jobs if spec is chain.entrypoint else {}),
            }
            for spec in chain.chainlets
        }
        deployment = Deployment(
            chain=chain.name,
            id=deploy_dir.name,
            source=str(source_file.absolute()),
            entrypoint=chain.entrypoint.name,
            entrypoint_kind=chain.entrypoint.endpoint.output_kind.name,
            entry_port=entry_port,
            entry_socket_from=entry_socket_from,
            python=self.target.python,
            grace_sec=max(drain_grace(spec) for spec in chain.chainlets) + _EXIT_MARGIN_SEC,
            chainlets=DeploymentChainlet.all_of(chain, generated_dir, versions, envs),
        )
        logs = home / "logs"

        def prepare() -> subprocess.Popen[bytes]:
            write_private(deploy_dir / "deployment.json", deployment.model_dump_json(indent=2))
            logs.mkdir(parents=True, exist_ok=True)
            return self.target._start_supervisor(deploy_dir)

        offsets = {p.name: p.stat().st_size for p in logs.glob("*.log")} if logs.is_dir() else {}
        supervisor = self.supervisor = writing(prepare, "write the deployment")
        try:
            return _wait_ready(deploy_dir, supervisor, options.timeout)
        except BaseException as exc:
            self.discard()
            if isinstance(exc, _StartFailed):
                source_dir = Path(deployment.source).parent
                tails = _log_tails(logs, offsets, exc.chainlets, source_dir)
                raise ChainsRuntimeError(f"{_headline(exc, tails)}{''.join(tails.values())}") from None
            raise

    def discard(self) -> None:
        supervisor, self.supervisor = self.supervisor, None
        if supervisor is not None:
            _terminate(supervisor.pid, 5.0, process_identity(supervisor.pid))
            supervisor.wait()

    def settle(self, state: ChainState) -> None:
        pass


def running_deployments(name: str) -> list[ChainState]:
    """Every deployment of chain ``name`` whose supervisor still runs, oldest first, found
    from the deployment folders, not the chain's state file (which may be lost): each
    supervisor is asked over its control socket, else found by its state or pid file."""
    deployments = chain_dir(name) / "deployments"
    if not deployments.is_dir():
        return []
    found = []
    for folder in sorted(deployments.iterdir()):
        state = _live_state(folder)
        if state is not None:
            found.append(state)
    return found


def _live_state(folder: Path) -> ChainState | None:
    if not (folder / "deployment.json").exists() and not (folder / PID_FILE).exists():
        return None  # not a local deployment (or not started)
    try:
        answer = control(folder, {"cmd": "state"}, timeout=10.0)
        if answer.get("ok"):
            return ChainState.model_validate(answer["state"])
    except (ChainsRuntimeError, OSError, ValueError):
        _remove_stale_socket(folder)
    with contextlib.suppress(OSError, ValueError):
        state = ChainState.model_validate_json((folder / "state.json").read_text())
        if _supervisor_runs(state):
            return state
    try:
        recorded = json.loads((folder / PID_FILE).read_text())
        pid, identity = int(recorded["pid"]), recorded.get("identity")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if identity is None or not same_process(pid, identity):
        return None
    # The supervisor runs but says nothing of its chainlets: stopping it stops them.
    with contextlib.suppress(OSError, ValueError):
        deployment = Deployment.model_validate_json((folder / "deployment.json").read_text())
        return ChainState(
            chain=deployment.chain,
            deployment=folder.name,
            source=deployment.source,
            entrypoint=deployment.entrypoint,
            entrypoint_url="",
            local=LocalRecord(supervisor_pid=pid, supervisor_identity=identity),
            processes=[],
        )
    return ChainState(
        chain=folder.parent.parent.name,
        deployment=folder.name,
        entrypoint="",
        entrypoint_url="",
        local=LocalRecord(supervisor_pid=pid, supervisor_identity=identity),
        processes=[],
    )


def _supervisor_runs(state: ChainState) -> bool:
    record = state.local
    return record is not None and same_process(record.supervisor_pid, record.supervisor_identity)


def _remove_stale_socket(folder: Path) -> None:
    """Remove the control socket of a deployment whose supervisor is gone (killed, it could
    not remove it): one that no process listens on, of a supervisor whose pid file names a
    process that no longer runs. A supervisor still starting (its socket bound, not yet
    listening) has a live pid file, and keeps its socket."""
    path = control_socket_path(folder)
    if not path.exists():
        return
    try:
        recorded = json.loads((folder / PID_FILE).read_text())
        if same_process(int(recorded["pid"]), recorded.get("identity")):
            return
    except (OSError, ValueError, KeyError, TypeError):
        return  # no pid file yet: it may be starting
    with closing(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)) as sock:
        try:
            sock.connect(str(path))
        except ConnectionRefusedError:
            path.unlink(missing_ok=True)
        except OSError:
            pass


def _entry_port(name: str, asked: int | None, previous: ChainState | None) -> tuple[int | None, str | None]:
    """The new deployment's entrypoint port, and the folder of the running deployment whose
    listening socket it takes over (None: it binds the port itself).

    A re-push keeps the entrypoint's URL: the running deployment hands its socket over, so
    that not one connection is refused or reset while both run. After the previous
    deployment died, its port is bound anew when nothing else took it meanwhile.
    """
    if previous is None or previous.target != "local" or not previous.entrypoint_url:
        if asked is not None:
            _check_port_free(asked, previous)
        return asked, None
    port = port_of(previous.entrypoint_url)
    if is_alive(previous) and asked in (None, port):
        return port, str(chain_dir(name) / "deployments" / previous.deployment)
    if asked is not None:
        _check_port_free(asked, previous)
        return asked, None
    return (port if port_free(port) else None), None


def _check_port_free(port: int, previous: ChainState | None) -> None:
    if previous is not None and is_alive(previous) and port_of(previous.entrypoint_url) == port:
        return
    check_port_free(port)


class _StartFailed(ChainsRuntimeError):
    def __init__(self, message: str, chainlets: list[str]) -> None:
        super().__init__(message)
        self.chainlets = chainlets


def _show_waiting(board: Board, state: ChainState | None) -> None:
    if state is not None:
        for p in state.processes:
            label = p.chainlet + (f"[{p.replica}]" if len(state.replicas(p.chainlet)) > 1 else "")
            stage = {"ready": Stage.DONE, "failed": Stage.FAILED}.get(p.state, Stage.WORKING)
            board.update(label, stage, p.state)
    board.tick()


def _wait_ready(deploy_dir: Path, supervisor: subprocess.Popen[bytes], timeout: float) -> ChainState:
    with progress.board("to finish __init__", title="starting the chainlets") as board:
        return _poll_ready(deploy_dir, supervisor, timeout, board)


def _poll_ready(
    deploy_dir: Path, supervisor: subprocess.Popen[bytes], timeout: float, board: Board
) -> ChainState:
    started = time.monotonic()
    deadline = started + timeout
    state_file = deploy_dir / "state.json"
    state: ChainState | None = None
    while time.monotonic() < deadline:
        if not state_file.exists() and control_socket_path(deploy_dir).exists():
            _check_supervisor_writes(deploy_dir)
        if state_file.exists():
            state = ChainState.model_validate_json(state_file.read_text())
        _show_waiting(board, state)
        if state is not None:
            failed = [p for p in state.processes if p.state == "failed"]
            if failed:
                names = sorted({p.chainlet for p in failed})
                raise _StartFailed(f"chainlet {', '.join(names)} failed to start", names)
            if state.processes and all(p.state == "ready" for p in state.processes):
                return state
        if supervisor.poll() is not None:
            log = (deploy_dir / "supervisor.log").read_text(errors="replace")[-2000:]
            raise _StartFailed(f"the supervisor exited with code {supervisor.returncode}:\n{log}", [])
        time.sleep(0.05)
    waiting = sorted({p.chainlet for p in state.processes if p.state != "ready"}) if state else []
    raise _StartFailed(
        f"chainlets not ready after {timeout:.0f}s: {', '.join(waiting) or 'all'} (still in __init__; "
        "if loading takes that long, push again with a longer --timeout, e.g. "
        f"--timeout {max(timeout * 4, 300):.0f})",
        waiting,
    )


def _check_supervisor_writes(deploy_dir: Path) -> None:
    """A supervisor that runs but cannot write its state (a full disk) fails the push clearly."""
    try:
        answer = control(deploy_dir, {"cmd": "state"}, timeout=5.0)
    except (ChainsRuntimeError, OSError, ValueError):
        return  # not listening yet
    if answer.get("write_error"):
        raise _StartFailed(
            f"the supervisor cannot write the chain's state in {deploy_dir} ({answer['write_error']}): "
            "free space there, or set CHAINS_HOME to a writable folder",
            [],
        )


# What uvicorn says as a server that failed to start shuts down: nothing about the cause.
_LIFECYCLE = re.compile(
    r"uvicorn\.error: (Waiting for application (startup|shutdown)|Application (startup|shutdown) complete"
    r"|Shutting down|Finished server process|Started server process)"
)


def _log_tails(
    logs: Path, offsets: Mapping[str, int], chainlets: list[str], source_dir: Path
) -> dict[str, str]:
    """Each failed chainlet's log since the push began, its last lines, in the user's files,
    without uvicorn's start and shutdown lines and the frames of chains and Python."""
    parts = {}
    for path in sorted(logs.glob("*.log")):
        if not any(path.stem == name or path.stem.startswith(f"{name}-") for name in chainlets):
            continue
        with open(path, "rb") as handle:
            handle.seek(offsets.get(path.name, 0))
            text = to_user_files(handle.read().decode(errors="replace"), source_dir)
        lines = condense(
            drop_cancellations([line for line in text.splitlines() if not _LIFECYCLE.search(line)])
        )
        tail = "\n".join(lines[-_LOG_TAIL_LINES:]) or "(nothing logged since it started)"
        parts[path.stem] = f"\n--- last lines of {path.name} ---\n{tail}"
    return parts


def _headline(exc: _StartFailed, tails: Mapping[str, str]) -> str:
    """The failure, led by the exception that caused it when one log shows one."""
    causes = {name: find_cause(text.splitlines()) for name, text in tails.items()}
    found = [(name, cause) for name, cause in causes.items() if cause is not None]
    if len(found) == 1:
        return f"{exc}: {found[0][1]}"
    if found:
        return f"{exc}:" + "".join(f"\n  {name}: {cause}" for name, cause in found)
    return str(exc)


def _terminate(pid: int, grace: float, identity: str | None) -> bool:
    """SIGTERM ``pid``, then SIGKILL after ``grace`` seconds; True when it is gone.

    Only while ``pid`` is still the process with ``identity``: another process that got the
    pid since is never signalled.
    """
    if not _signal(pid, identity, signal.SIGTERM):
        return True
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not same_process(pid, identity):
            return True
        time.sleep(0.05)
    _signal(pid, identity, signal.SIGKILL)
    return False


def _end_group(pid: int, identity: str | None) -> None:
    """Kill what is left of the process group of the chainlet that was ``pid``: the helpers
    it started, which outlive it when its supervisor was killed (nothing stopped them then).

    Only a group that is the chainlet's: either ``pid`` is still that chainlet (running, or
    dead and not yet reaped), or no process has the pid, and the kernel does not hand out
    the id of a group that still exists.
    """
    found = process_identity(pid)
    if found is None or found == identity:
        kill_group(pid)


def _signal(pid: int, identity: str | None, sig: signal.Signals) -> bool:
    """Send ``sig`` to ``pid`` if it is the process with ``identity``; False when it is not
    (gone, or another process). Through a pidfd where there is one, so that the pid checked
    is the pid signalled."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    except (AttributeError, OSError):
        pidfd = -1
    try:
        if not same_process(pid, identity):
            return False
        try:
            if pidfd >= 0:
                signal.pidfd_send_signal(pidfd, sig)
            else:
                os.kill(pid, sig)
        except ProcessLookupError:
            return False
        return True
    finally:
        if pidfd >= 0:
            os.close(pidfd)


def control(deploy_dir: Path, command: Mapping[str, object], timeout: float = 120.0) -> dict[str, object]:
    """Send one command to a deployment's supervisor and return its answer."""
    path = control_socket_path(deploy_dir)
    with closing(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(str(path))
        except OSError as exc:
            if isinstance(exc, ConnectionRefusedError) or exc.errno == errno.ECONNREFUSED:
                _remove_stale_socket(deploy_dir)
            raise ChainsRuntimeError(f"the supervisor of {deploy_dir.name} does not answer: {exc}") from None
        sock.sendall(json.dumps(command).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    answer: dict[str, object] = json.loads(data or b"{}")
    return answer


TARGET = Target(
    name="local",
    kind=TargetKind.RUNNING,
    options=LocalOptions,
    acts_on=frozenset({SettingGroup.DATA_DIR, SettingGroup.PACKAGE_DIRS}),
    build=LocalTarget,
    capabilities=Capabilities(restart=True, patch=True, process_liveness=True),
)
