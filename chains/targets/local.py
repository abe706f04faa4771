"""The local target: every chainlet as its own process on 127.0.0.1, under a supervisor."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import closing
from pathlib import Path

from chains.checks import Chain
from chains.errors import ChainsRuntimeError, ChainsUsageError
from chains.targets import PushOptions, running_target
from chains.targets.state import (
    ChainState,
    Deployment,
    DeploymentChainlet,
    chain_dir,
    current_state,
    forget,
    iter_logs,
    make_current,
    new_deployment_dir,
    pid_alive,
    write_private,
)
from chains.targets.supervisor import control_socket_path

__all__ = ["LocalTarget", "control", "follow_files"]

_LOG_TAIL_LINES = 30


class LocalTarget:
    """Starts, replaces and stops local deployments of a chain."""

    def __init__(self, python: str | None = None) -> None:
        self.python = python or sys.executable

    def push(self, chain: Chain, source_file: Path, options: PushOptions) -> ChainState:
        """Start ``chain`` and wait until every chainlet is ready; replaces a running one.

        The new deployment becomes current only once it is ready, then the previous one
        (if any) is stopped: callers of the entrypoint see no gap.
        """
        from codegen import generate  # the generator is only needed when pushing

        home = chain_dir(chain.name)
        deploy_dir = new_deployment_dir(chain.name)
        generated_dir = deploy_dir / "generated"
        result = generate(chain, source_file, generated_dir)
        versions = {name: c.code_version for name, c in result.chainlets.items()}
        previous = current_state(chain.name)
        entry_port = options.entry_port
        if entry_port is None and previous is not None and previous.target == "local" and previous.alive:
            # Keep the entrypoint's URL across pushes (both bind it with SO_REUSEPORT).
            entry_port = _port_of(previous.entrypoint_url)
        elif entry_port is not None:
            _check_port_free(entry_port, previous)
        token = secrets.token_urlsafe(32)
        deployment = Deployment(
            chain=chain.name,
            id=deploy_dir.name,
            source=str(source_file),
            entrypoint=chain.entrypoint.name,
            entrypoint_kind=chain.entrypoint.endpoint.output_kind.name,
            entry_port=entry_port,
            python=self.python,
            chainlets=[
                DeploymentChainlet(
                    name=spec.name,
                    directory=str(generated_dir / spec.name),
                    replicas=spec.remote_config.compute.replicas,
                    is_entrypoint=spec is chain.entrypoint,
                    code_version=versions.get(spec.name, ""),
                    env=_environment(chain, spec.name, token, options),
                )
                for spec in chain.chainlets
            ],
        )
        write_private(deploy_dir / "deployment.json", deployment.model_dump_json(indent=2))
        logs = home / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        offsets = {p.name: p.stat().st_size for p in logs.glob("*.log")}
        supervisor = self._start_supervisor(deploy_dir)
        try:
            state = _wait_ready(deploy_dir, supervisor, options.timeout)
        except _StartFailed as exc:
            _terminate(supervisor.pid, grace=5)
            shutil.rmtree(deploy_dir, ignore_errors=True)
            raise ChainsRuntimeError(f"{exc}{_log_tails(logs, offsets, exc.chainlets)}") from None
        make_current(chain.name, deploy_dir)
        if previous is not None:
            running_target(previous.target).stop(previous, grace=15.0)
            forget(chain.name, keep=deploy_dir.name)
        return state

    def alive(self, state: ChainState) -> bool:
        return pid_alive(state.supervisor_pid)

    def logs(self, state: ChainState, chainlet: str | None, follow: bool, lines: int) -> Iterator[str]:
        paths = list(iter_logs(state.chain))
        if chainlet is not None:
            paths = [p for p in paths if p.stem == chainlet or p.stem.startswith(f"{chainlet}-")]
        return follow_files(paths, lines, follow)

    def stop(self, state: ChainState, grace: float) -> None:
        """Stop one deployment: its supervisor drains the chainlets; stragglers are killed."""
        _terminate(state.supervisor_pid, grace)
        for process in state.processes:
            if process.pid and pid_alive(process.pid):
                _terminate(process.pid, 1.0)

    def _start_supervisor(self, deploy_dir: Path) -> subprocess.Popen[bytes]:
        log = open(deploy_dir / "supervisor.log", "ab")  # noqa: SIM115 - handed to the child
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


def _environment(chain: Chain, name: str, token: str, options: PushOptions) -> dict[str, str]:
    spec = chain.get(name)
    secrets_values = options.secrets
    env = dict(spec.remote_config.options.env_variables)
    env.update(
        {
            "CHAINS_CHAIN": chain.name,
            "CHAINS_INTERNAL_TOKEN": token,
            "CHAINS_IS_ENTRYPOINT": "1" if spec is chain.entrypoint else "0",
            "CHAINS_ENVIRONMENT": "local",
            "PYTHONUNBUFFERED": "1",
        }
    )
    for key in spec.remote_config.assets.secret_keys:
        if key in secrets_values:
            env[f"CHAINS_SECRET_{key}"] = secrets_values[key]
    if spec is chain.entrypoint and options.api_key:
        env["CHAINS_API_KEY"] = options.api_key
    return env


def _port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


def _check_port_free(port: int, previous: ChainState | None) -> None:
    if previous is not None and previous.alive and _port_of(previous.entrypoint_url) == port:
        return
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            raise ChainsUsageError(f"port {port} on 127.0.0.1 is in use; pick another with --port") from None


class _StartFailed(ChainsRuntimeError):
    def __init__(self, message: str, chainlets: list[str]) -> None:
        super().__init__(message)
        self.chainlets = chainlets


def _wait_ready(deploy_dir: Path, supervisor: subprocess.Popen[bytes], timeout: float) -> ChainState:
    deadline = time.monotonic() + timeout
    state_file = deploy_dir / "state.json"
    state: ChainState | None = None
    while time.monotonic() < deadline:
        if state_file.exists():
            state = ChainState.model_validate_json(state_file.read_text())
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
    raise _StartFailed(f"chainlets not ready after {timeout:.0f}s: {', '.join(waiting) or 'all'}", waiting)


def _log_tails(logs: Path, offsets: Mapping[str, int], chainlets: list[str]) -> str:
    parts = []
    for path in sorted(logs.glob("*.log")):
        if not any(path.stem == name or path.stem.startswith(f"{name}-") for name in chainlets):
            continue
        with open(path, "rb") as handle:
            handle.seek(offsets.get(path.name, 0))
            text = handle.read().decode(errors="replace")
        tail = "\n".join(text.splitlines()[-_LOG_TAIL_LINES:])
        parts.append(f"\n--- last lines of {path.name} ---\n{tail}")
    return "".join(parts)


def _terminate(pid: int, grace: float) -> bool:
    """SIGTERM ``pid``, then SIGKILL after ``grace`` seconds; True when it is gone."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    return False


def follow_files(paths: list[Path], lines: int, follow: bool) -> Iterator[str]:
    """The last ``lines`` of each file, prefixed with its name when there are several; with
    ``follow``, then every line appended to them, until the caller stops iterating."""
    handles = []
    try:
        for path in paths:
            handle = open(path, errors="replace")  # noqa: SIM115 - kept open while following
            handles.append((path, handle))
            for line in handle.read().splitlines()[-lines:]:
                yield f"{path.stem} | {line}" if len(paths) > 1 else line
        while follow:
            quiet = True
            for path, handle in handles:
                for line in iter(handle.readline, ""):
                    quiet = False
                    text = line.rstrip("\n")
                    yield f"{path.stem} | {text}" if len(paths) > 1 else text
            if quiet:
                time.sleep(0.2)
    finally:
        for _, handle in handles:
            handle.close()


def control(deploy_dir: Path, command: Mapping[str, object], timeout: float = 120.0) -> dict[str, object]:
    """Send one command to a deployment's supervisor and return its answer."""
    path = control_socket_path(deploy_dir)
    with closing(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(str(path))
        except OSError as exc:
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
