"""The supervisor of one local deployment: ``python -m chains.targets.supervisor DEPLOY_DIR``.

It owns every chainlet's listening socket and hands it to the chainlet process, so that a
restarted (or replaced) process serves the same port and calls made in between wait in the
socket's backlog instead of being refused. It restarts crashed chainlets with backoff (a
crash loop is retried ever more slowly, up to every 5 minutes, its port answering 503 at
once meanwhile), restarts hung ones (:mod:`chains.targets.liveness`), stops every process a
chainlet started with it (:mod:`chains.targets.descendants`), records what runs in ``state.json``, and takes
commands (``replace``, ``restart``, ``stop``, ``state``, and ``entry_socket``, which hands the entrypoint's
listening socket to the deployment replacing this one) on a unix socket.

Its chainlets die with it, even when it is killed with SIGKILL (``PR_SET_PDEATHSIG``): no
chainlet outlives the process that the chain's state names. A state file it cannot write (a
full disk) is logged and retried at the next change; it never stops the supervising.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chains.server.loop_watch import BEAT_FILE_ENV, THRESHOLD_ENV
from chains.server.memory_errors import BOUND_ENV
from chains.targets.control_sockets import (
    ENTRY_SOCKET_COMMAND,
    control_socket_path,
    send_entry_socket,
    take_entry_socket,
)
from chains.targets.descendants import Descendants
from chains.targets.down_answer import DownAnswer
from chains.targets.exits import describe_exit, die_with, kill_group, oom_kill_count
from chains.targets.liveness import LivenessPolicy, Probation
from chains.targets.log_writer import LogLimits, LogPipe, RotatingLog
from chains.targets.memory_limits import MemoryBound
from chains.targets.state import (
    ChainletProcess,
    ChainState,
    Deployment,
    DeploymentChainlet,
    LocalRecord,
    process_identity,
    write_private,
)

__all__ = ["PID_FILE", "Supervisor", "control_socket_path", "main"]

PID_FILE = "supervisor.pid"


# A replica that has been ready this long has its crash count (and so its back-off) renewed.
RESTART_WINDOW_SEC = 60.0
# Crashes in a row after which a replica is shown as failed (a crash loop); it is still
# started again, ever more slowly.
MAX_RESTARTS_IN_WINDOW = 5
# A restart delayed this long has its port answer 503 meanwhile; a shorter one keeps the calls
# in the backlog, where the restart (a stub's retries would span it) answers them.
ANSWER_WHILE_DOWN_SEC = 2.0
# The longest wait between two starts of a crash-looping replica (Kubernetes' CrashLoopBackOff cap).
MAX_BACKOFF_SEC = 300.0
_POLL_SEC = 0.05


@dataclass
class _Replica:
    spec: DeploymentChainlet
    index: int
    sock: socket.socket
    log_path: Path
    record: ChainletProcess
    log: RotatingLog
    process: subprocess.Popen[bytes] | None = None
    ever_ready: bool = False
    crashes: int = 0  # in a row: renewed once a process has been ready for RESTART_WINDOW_SEC
    ready_since: float | None = None
    restart_at: float | None = None
    retiring: list[subprocess.Popen[bytes]] = field(default_factory=list)
    probation: Probation | None = None
    killed_because: str | None = None  # set when the supervisor kills it (a failed liveness probe)
    oom_kills_at_start: int | None = None
    answer: DownAnswer | None = None  # 503s on its port while it is down for a while
    bound_said: bool = False  # its memory bound is logged at its first start
    fenced: bool = False  # its port answered 503 by the supervisor while it does not answer


class Supervisor:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.deployment = Deployment.model_validate_json((directory / "deployment.json").read_text())
        self.logs = directory.parent.parent / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.replicas: list[_Replica] = []
        self.stopping = False
        self._stopped = asyncio.Event()
        self.run_dir = directory / "run"
        self.run_dir.mkdir(exist_ok=True)
        self._spawned = 0
        self._ready_files: dict[int, Path] = {}
        self._identities: dict[int, str | None] = {}
        self._descendants = Descendants(tie=die_with(os.getpid()), say=_say)
        self.identity = process_identity(os.getpid())
        self.write_error: str | None = None  # why the last state write failed, until one succeeds
        self.liveness = LivenessPolicy.from_environment(os.environ)
        self.log_limits = LogLimits.from_environment(os.environ)
        self._connecting: set[asyncio.Future[Any]] = set()
        self._log_pipes: set[LogPipe] = set()
        self._fencing: set[asyncio.Future[None]] = set()  # a reference until each fence is up

    # -- setup -------------------------------------------------------------------------------

    def _listen(self, port: int) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Lets a replacement deployment that was not handed this socket (``entry_socket``)
        # bind the entrypoint's port while this one drains.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((self.deployment.host, port))
        sock.listen(1024)
        sock.set_inheritable(True)
        return sock

    def open_sockets(self) -> None:
        """Bind every replica's port first, so each process starts knowing all the URLs."""
        host = self.deployment.host
        for chainlet in self.deployment.chainlets:
            for index in range(chainlet.replicas):
                port = self.deployment.entry_port if chainlet.is_entrypoint and index == 0 else 0
                taken = (
                    take_entry_socket(self.deployment.entry_socket_from, port)
                    if chainlet.is_entrypoint and index == 0
                    else None
                )
                sock = taken or self._listen(port or 0)
                bound = sock.getsockname()[1]
                suffix = f"-{index}" if chainlet.replicas > 1 else ""
                log_path = self.logs / f"{chainlet.name}{suffix}.log"
                record = ChainletProcess(
                    chainlet=chainlet.name,
                    replica=index,
                    port=bound,
                    url=f"http://{host}:{bound}",
                    log=str(log_path),
                    directory=chainlet.directory,
                    code_version=chainlet.code_version,
                )
                log = RotatingLog(log_path, self.log_limits)
                self.replicas.append(_Replica(chainlet, index, sock, log_path, record, log))

    def dependency_urls(self) -> dict[str, list[str]]:
        urls: dict[str, list[str]] = {}
        for replica in self.replicas:
            urls.setdefault(replica.spec.name, []).append(replica.record.url)
        return urls

    # -- processes ---------------------------------------------------------------------------

    def _spawn(self, replica: _Replica, directory: str | None = None) -> subprocess.Popen[bytes]:
        spec = replica.spec
        env = dict(os.environ)
        env.update(spec.env)
        env["CHAINS_DEPENDENCY_URLS"] = json.dumps(self.dependency_urls())
        env["CHAINS_REPLICA"] = str(replica.index)
        self._spawned += 1
        # The process creates this file once its chainlet is built. On a shared socket an
        # HTTP probe could be answered by the process being replaced, the file cannot.
        ready_file = self.run_dir / f"{spec.name}-{replica.index}-{self._spawned}.ready"
        ready_file.unlink(missing_ok=True)
        env["CHAINS_READY_FILE"] = str(ready_file)
        beat_file = ready_file.with_suffix(".beat")
        beat_file.unlink(missing_ok=True)
        if env.get(THRESHOLD_ENV, "").strip() not in ("0", "0.0"):
            # Made now, so that a process stopped before its loop watch's first beat has one
            # too, as old as the process; without the watch it has none (no sign either way).
            with contextlib.suppress(OSError):  # a full disk: no beats, the probes alone decide
                os.close(os.open(beat_file, os.O_WRONLY | os.O_CREAT, 0o600))
                env[BEAT_FILE_ENV] = str(beat_file)
        bound = self._memory_bound(replica)
        if bound is not None:
            env[BOUND_ENV] = bound.describe()
        fd = replica.sock.fileno()
        # Through a pipe, not the file itself: the supervisor rotates the file and counts
        # what it cannot write; a chainlet writing faster than the disk takes waits on the pipe.
        process = subprocess.Popen(
            [self.deployment.python, "server.py", "--fd", str(fd)],
            cwd=directory or replica.record.directory,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            pass_fds=(fd,),
            preexec_fn=self._descendants.preexec(bound),
        )
        self._descendants.started(process.pid, bound)
        assert process.stdout is not None
        self._log_pipes = {p for p in self._log_pipes if not p.ended.is_set()}
        pipe = LogPipe(replica.log)
        copying = asyncio.ensure_future(
            asyncio.get_running_loop().connect_read_pipe(lambda: pipe, process.stdout)
        )
        self._connecting.add(copying)  # a reference until connected, as the loop keeps weak ones
        copying.add_done_callback(self._connecting.discard)
        self._log_pipes.add(pipe)
        self._ready_files[process.pid] = ready_file
        # Read while the child is ours and unreaped, so the pid cannot name another process yet.
        self._identities[process.pid] = process_identity(process.pid)
        return process

    def _memory_bound(self, replica: _Replica) -> MemoryBound | None:
        """A fresh bound for a new process of ``replica`` (None: its chainlet names no memory)."""
        limit = replica.spec.memory_limit
        if limit is None:
            return None
        deployment = self.deployment
        name = (
            f"chains-{deployment.chain}-{deployment.id}-{replica.spec.name}-{replica.index}-{self._spawned}"
        )
        bound = self._descendants.bound_for(name, limit)
        if not replica.bound_said:
            replica.bound_said = True
            why = (
                ""
                if bound.group is not None
                else f" ({self._descendants.unbounded_why}: allocations past it fail)"
            )
            self._log(replica, f"memory bounded at {bound.describe()}{why}")
        return bound

    def _is_ready(self, process: subprocess.Popen[bytes]) -> bool:
        return process.poll() is None and self._ready_files[process.pid].exists()

    def start(self, replica: _Replica) -> None:
        self._unfence(replica)
        replica.process = self._spawn(replica)
        replica.record.pid = replica.process.pid
        # A crash loop stays shown as failed through each of its attempts, until one is ready.
        looping = replica.crashes > MAX_RESTARTS_IN_WINDOW and replica.record.state == "failed"
        replica.record.state = "failed" if looping else "starting"
        replica.record.started_at = time.time()
        replica.probation = None
        replica.ready_since = None
        replica.oom_kills_at_start = oom_kill_count()

    async def _check(self, replica: _Replica) -> None:
        record = replica.record
        now = time.monotonic()
        for old in list(replica.retiring):
            if old.poll() is not None:
                self._descendants.end(old.pid)  # what the replaced process started
                replica.retiring.remove(old)
        if replica.process is None:
            if replica.restart_at is not None and now >= replica.restart_at and not self.stopping:
                replica.restart_at = None
                self.start(replica)
                self.write_state()
            return
        code = replica.process.poll()
        if code is None:
            if record.state in ("starting", "restarting", "failed") and self._is_ready(replica.process):
                record.state = "ready"
                replica.ever_ready = True
                replica.ready_since = now
                self.write_state()
            elif record.state == "ready":
                if replica.ready_since is not None and now - replica.ready_since >= RESTART_WINDOW_SEC:
                    replica.crashes = 0
                self._probe(replica, now)
            return
        if self.stopping:
            return
        # The process is gone without being asked to go; so is whatever it started (once its
        # cgroup's record of an out-of-memory kill is read).
        why = replica.killed_because or self._exit_words(replica, code)
        self._descendants.end(replica.process.pid)
        replica.process = None
        replica.fenced = False  # its port keeps the fence's answer (if any) until its next start
        if replica.probation is not None:
            replica.probation.cancel()
        record.pid = None
        record.last_exit = code
        replica.killed_because = None
        record.reason = why
        refused = self._others_ready(replica)
        if refused:
            self._refuse_while_down(replica)
        if not replica.ever_ready:
            # It never started: restarting would fail the same way.
            self._give_up(replica, refused, f"{why} before it was ready")
            return
        delay = 0.0 if not replica.crashes else min(0.25 * 2**replica.crashes, MAX_BACKOFF_SEC)
        replica.crashes += 1
        record.restarts += 1
        replica.restart_at = now + delay
        if replica.crashes > MAX_RESTARTS_IN_WINDOW:
            # A crash loop: shown as failed (the chain is degraded), still started again slowly.
            record.state = "failed"
            record.reason = f"crash loop ({replica.crashes} crashes in a row; last: {why})"
            again = f"chains restart {self.deployment.chain} {replica.spec.name}"
            self._log(
                replica,
                f"{why}; crashed {replica.crashes} times in a row: starting it again in {delay:.0f}s "
                f"(the wait doubles up to {MAX_BACKOFF_SEC / 60:.0f} min; `{again}` starts it now)",
            )
        else:
            record.state = "restarting"
            self._log(replica, f"{why}; restarting in {delay:.2f}s")
        if delay >= ANSWER_WHILE_DOWN_SEC and not refused:
            await self._answer_while_down(replica)
        self.write_state()

    def _exit_words(self, replica: _Replica, code: int) -> str:
        bound = self._descendants.bound_of(replica.process.pid) if replica.process is not None else None
        if bound is not None and bound.group is not None:
            # The process's own cgroup counts its out-of-memory kills: no guess from the machine's.
            return describe_exit(code, bound.oom_kills(), bound.describe())
        before, after = replica.oom_kills_at_start, oom_kill_count()
        oom_kills = after - before if before is not None and after is not None else 0
        return describe_exit(code, oom_kills)

    # -- liveness ----------------------------------------------------------------------------

    def _probe(self, replica: _Replica, now: float) -> None:
        """Drive the liveness probes of a ready replica; kill it once they say it is dead (it is
        then restarted as a crashed one). Not while a replaced process still drains on the
        same socket, as its answer would be taken for the new one's."""
        policy = self.liveness
        if not policy.enabled or replica.retiring or replica.process is None:
            return
        if replica.probation is None:
            replica.probation = Probation(next_at=now + policy.period_sec)
            return
        probation = replica.probation
        if replica.fenced:
            missed = self._fenced_probe(replica, probation, now)
        else:
            host, port = replica.sock.getsockname()[:2]
            missed = probation.step(now, policy, host, port)
        if missed is not None:
            self._log(replica, f"health check failed ({probation.misses}/{policy.failures}): {missed}")
            if probation.misses >= policy.failures:
                self._kill_unresponsive(replica, now, probation)
            elif not replica.fenced:
                fencing = self._fence(replica, missed)
                if fencing is not None:
                    self._fencing.add(fencing)
                    fencing.add_done_callback(self._fencing.discard)

    # -- a lone replica that stopped answering -------------------------------------------------

    def _beat_age(self, replica: _Replica) -> float | None:
        """Seconds since the replica's loop last ran (its loop watch's beat), None without beats."""
        assert replica.process is not None
        beat = self._ready_files[replica.process.pid].with_suffix(".beat")
        try:
            return max(0.0, time.time() - beat.stat().st_mtime)
        except OSError:
            return None

    def _fence(self, replica: _Replica, missed: str) -> asyncio.Future[None] | None:
        """After a first missed probe of a lone replica whose loop has stopped beating, answer
        its port 503 with ``Retry-After`` until it beats again or is restarted: callers fail
        fast instead of waiting out the rest of the probes in its backlog. The process keeps
        its socket, so a loop that runs again takes its calls again at once."""
        age = self._beat_age(replica)
        if self._others_ready(replica) or age is None or age < self.liveness.timeout_sec:
            # Others take the calls; or no beats to tell a hang by (the loop watch is off);
            # or its loop runs (a slow health check): the probes alone decide.
            return None
        replica.fenced = True
        name = replica.spec.name

        def detail() -> str:
            return f"{name} is not answering ({missed}); it is restarted if it does not answer again"

        async def fence() -> None:
            try:
                answer = await DownAnswer.open(replica.sock, detail)
            except OSError as exc:
                self._log(replica, f"calls wait in its port's backlog while it does not answer ({exc})")
                return
            if not replica.fenced:  # it answered again meanwhile
                answer.close()
                return
            self._close_answer(replica)
            replica.answer = answer
            self._log(replica, "its port answers 503 (Retry-After) until it answers again or is restarted")

        return asyncio.ensure_future(fence())

    def _fenced_probe(self, replica: _Replica, probation: Probation, now: float) -> str | None:
        """While fenced, the loop's beat is the probe (an HTTP probe would reach the fence):
        a fresh beat lifts the fence, and the HTTP probes take over again."""
        probation.cancel()
        age = self._beat_age(replica)
        if age is not None and age < self.liveness.timeout_sec:
            self._unfence(replica)
            self._log(replica, "its event loop runs again: its port is its own again")
            return None
        if now < probation.next_at:
            return None
        probation.next_at = now + self.liveness.period_sec
        reason = f"its event loop has not run for {age:.0f}s" if age is not None else "no beat"
        probation.missed(now, reason)
        return reason

    def _unfence(self, replica: _Replica) -> None:
        replica.fenced = False
        self._close_answer(replica)

    def _kill_unresponsive(self, replica: _Replica, now: float, probation: Probation) -> None:
        assert replica.process is not None and probation.first_miss_at is not None
        silent = now - probation.first_miss_at + self.liveness.timeout_sec
        replica.killed_because = f"not answering its health check for {silent:.0f}s ({probation.last_reason})"
        self._log(replica, f"killing it: {replica.killed_because}")
        # SIGKILL: a stopped (SIGSTOP) or blocked process cannot drain; the group takes its helpers.
        kill_group(replica.process.pid)
        with contextlib.suppress(ProcessLookupError):
            replica.process.kill()

    # -- while down --------------------------------------------------------------------------

    async def _answer_while_down(self, replica: _Replica) -> None:
        """Answer the calls that reach ``replica``'s port 503 at once until its next start."""
        self._close_answer(replica)
        name = replica.spec.name

        def detail() -> str:
            wait = max(0.0, (replica.restart_at or time.monotonic()) - time.monotonic())
            return f"{name} is down ({replica.record.reason}); it is started again in {wait:.0f}s"

        try:
            replica.answer = await DownAnswer.open(replica.sock, detail)
        except OSError as exc:
            self._log(replica, f"calls wait in its port's backlog while it is down ({exc})")

    def _close_answer(self, replica: _Replica) -> None:
        if replica.answer is not None:
            replica.answer.close()
            replica.answer = None

    def _give_up(self, replica: _Replica, refused: bool, message: str) -> None:
        """Mark ``replica`` failed for good: ``chains restart`` is what starts it again.

        Its port refuses connections from now on (if it does not already): a call waiting
        in the backlog would wait for a process that never comes, where a refused
        connection fails the caller's stub at once, and the entrypoint answers 503 naming
        this chainlet.
        """
        replica.record.state = "failed"
        if not refused:
            self._refuse_while_down(replica)
        again = f"chains restart {self.deployment.chain} {replica.spec.name}"
        self._log(replica, f"{message}; giving up (`{again}` starts it again)")
        self.write_state()

    async def restart(self, chainlet: str | None, timeout: float) -> list[str]:
        """Start ``chainlet`` (every chainlet when None) again without a re-push: replicas
        that failed for good start afresh, with their restart budget renewed; a chainlet
        whose replicas all run gets new processes, swapped in once they are ready. Returns
        the chainlets restarted; raises when one does not become ready within ``timeout``.
        """
        names = list(dict.fromkeys(r.spec.name for r in self.replicas))
        if chainlet is not None:
            if chainlet not in names:
                raise ValueError(f"no chainlet {chainlet!r} in this deployment; it has: {', '.join(names)}")
            names = [chainlet]
        deadline = time.monotonic() + timeout
        for name in names:
            replicas = [r for r in self.replicas if r.spec.name == name]
            # A crash-looping replica may be in one of its slow attempts: that one is ended first.
            down = [r for r in replicas if r.process is None or r.record.state == "failed"]
            if not down:
                first = replicas[0].record
                await self.replace(name, first.directory, first.code_version, deadline - time.monotonic())
                continue
            for replica in down:
                if replica.process is not None:
                    kill_group(replica.process.pid)
                    replica.process.kill()
                    replica.process.wait()
                    self._descendants.end(replica.process.pid)
                replica.crashes = 0
                replica.restart_at = None
                replica.ever_ready = False
                replica.record.restarts += 1
                self._log(replica, "restarted on request")
                self.start(replica)
            self.write_state()
            while any(r.record.state != "ready" for r in down):
                failed = [r for r in down if r.record.state == "failed"]
                if failed or time.monotonic() > deadline:
                    why = "failed again" if failed else f"is not ready after {timeout:.0f}s"
                    raise RuntimeError(f"{name} {why}; see {down[0].log_path}")
                await asyncio.sleep(_POLL_SEC)
        return names

    def _others_ready(self, replica: _Replica) -> bool:
        return any(
            other is not replica
            and other.spec.name == replica.spec.name
            and other.process is not None
            and other.record.state == "ready"
            for other in self.replicas
        )

    def _refuse_while_down(self, replica: _Replica) -> None:
        """Swap the replica's listening socket for one bound to the same port that does not
        listen yet, so that connections to it are refused until its new process listens.

        The backlog is what a lone replica wants (calls wait for its restart), but while
        another replica is ready, a call waiting here would wait for nothing: a refused
        connection sends it to the live replica at once. Closing the old socket also resets
        the connections already queued on it, which the stubs retry on the live replica. The
        new process listens on the socket as it starts serving (asyncio's ``create_server``).
        """
        old = replica.sock
        fresh = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            fresh.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            # Bound before the old one closes (SO_REUSEPORT), so the port is never free to take.
            fresh.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            fresh.bind(old.getsockname())
        except OSError as exc:
            fresh.close()
            self._log(replica, f"keeps its listening socket while down (cannot bind a fresh one: {exc})")
            return
        fresh.set_inheritable(True)
        replica.sock = fresh
        old.close()

    def _log(self, replica: _Replica, message: str) -> None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        lost = replica.log.lost_lines
        replica.log.write(f"{stamp} SUPERVISOR {replica.spec.name}: {message}\n".encode())
        if replica.log.lost_lines > lost:  # a full disk: say it where it may still get through
            _say(f"{replica.spec.name}: {message} (not written to {replica.log_path})")

    async def replace(self, chainlet: str, directory: str, code_version: str, timeout: float) -> None:
        """Start new processes of ``chainlet`` from ``directory`` on the same sockets; once
        they are ready, stop the old ones. Calls keep being answered throughout."""
        targets = [r for r in self.replicas if r.spec.name == chainlet]
        if not targets:
            raise ValueError(f"no chainlet {chainlet!r} in this deployment")
        fresh = [(r, self._spawn(r, directory)) for r in targets]
        deadline = time.monotonic() + timeout
        for replica, process in fresh:
            while not self._is_ready(process):
                if process.poll() is not None or time.monotonic() > deadline:
                    for _, started in fresh:
                        started.kill()
                        started.wait()
                        self._descendants.end(started.pid)
                    raise RuntimeError(
                        f"the new {chainlet} did not become ready (exit code {process.poll()}); "
                        f"see {replica.log_path}"
                    )
                await asyncio.sleep(_POLL_SEC)
        for replica, process in fresh:
            old = replica.process
            replica.process = process
            replica.record.pid = process.pid
            replica.record.state = "ready"
            replica.record.started_at = time.time()
            replica.record.directory = directory
            replica.record.code_version = code_version
            replica.ever_ready = True
            replica.probation = None
            self._unfence(replica)
            replica.ready_since = time.monotonic()
            if old is not None and old.poll() is None:
                old.send_signal(signal.SIGTERM)
                replica.retiring.append(old)
        self.write_state()

    # -- state -------------------------------------------------------------------------------

    def state(self) -> ChainState:
        entry = next(r for r in self.replicas if r.spec.is_entrypoint)
        for replica in self.replicas:
            pid = replica.record.pid
            replica.record.identity = self._identities.get(pid) if pid else None
            replica.record.log_lines_lost = replica.log.lost_lines
        return ChainState(
            chain=self.deployment.chain,
            deployment=self.deployment.id,
            target="local",
            source=self.deployment.source,
            entrypoint=self.deployment.entrypoint,
            entrypoint_kind=self.deployment.entrypoint_kind,
            entrypoint_url=entry.record.url,
            local=LocalRecord(
                supervisor_pid=os.getpid(),
                supervisor_identity=self.identity,
                reaper_pid=self._descendants.reaper_pid,
                reaper_identity=self._descendants.reaper_identity,
            ),
            processes=[r.record for r in self.replicas],
            grace_sec=self.deployment.grace_sec,
            stopping=self.stopping,
        )

    def write_state(self) -> None:
        """Record what runs. A failed write (a full disk) is logged once and retried at the
        next change; the control socket's ``state`` answers meanwhile."""
        try:
            write_private(self.directory / "state.json", self.state().model_dump_json(indent=2))
        except OSError as exc:
            if self.write_error is None:
                _say(f"cannot write the state file ({exc}); supervising on, retrying at the next change")
            self.write_error = str(exc)
            return
        if self.write_error is not None:
            _say("the state file is written again")
            self.write_error = None

    def write_pid_file(self) -> None:
        """Who supervises this deployment, for ``chains stop`` when the state file is lost."""
        text = json.dumps({"pid": os.getpid(), "identity": self.identity})
        try:
            write_private(self.directory / PID_FILE, text)
        except OSError as exc:
            _say(f"cannot write {PID_FILE} ({exc}); the control socket still finds this supervisor")

    # -- control -----------------------------------------------------------------------------

    async def _control(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = json.loads(await reader.readline())
            command = request.get("cmd")
            if command == "replace":
                await self.replace(
                    request["chainlet"],
                    request["directory"],
                    request.get("code_version", ""),
                    float(request.get("timeout", 60)),
                )
                answer: dict[str, Any] = {"ok": True}
            elif command == "restart":
                chainlet = request.get("chainlet")
                restarted = await self.restart(
                    str(chainlet) if chainlet is not None else None, float(request.get("timeout", 60))
                )
                answer = {"ok": True, "restarted": restarted}
            elif command == ENTRY_SOCKET_COMMAND:
                entry = next(r for r in self.replicas if r.spec.is_entrypoint and r.index == 0)
                send_entry_socket(writer, entry.sock)
                writer.close()
                return
            elif command == "stop":
                asyncio.get_running_loop().call_soon(self.request_stop)
                answer = {"ok": True}
            elif command == "state":
                answer = {
                    "ok": True,
                    "state": self.state().model_dump(mode="json"),
                    "write_error": self.write_error,
                }
            else:
                answer = {"ok": False, "error": f"unknown command {command!r}"}
        except Exception as exc:
            answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        writer.write(json.dumps(answer).encode() + b"\n")
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        writer.close()

    def request_stop(self) -> None:
        self.stopping = True
        self._stopped.set()

    async def _shutdown(self) -> None:
        self.write_state()
        deadline = time.monotonic() + self.deployment.grace_sec
        # The entrypoint drains first: the calls it still answers need the chainlets it calls.
        for entrypoint in (True, False):
            processes = [
                p
                for r in self.replicas
                if r.spec.is_entrypoint is entrypoint
                for p in [r.process, *r.retiring]
                if p is not None
            ]
            await self._stop_processes(processes, max(deadline, time.monotonic() + 1.0))
        # The last lines the chainlets wrote as they stopped (their drain) are still in the pipes.
        ends = [asyncio.ensure_future(p.ended.wait()) for p in self._log_pipes if not p.ended.is_set()]
        if ends:
            _, pending = await asyncio.wait(ends, timeout=2.0)
            for end in pending:
                end.cancel()
        for replica in self.replicas:
            self._close_answer(replica)
            replica.log.close()
            replica.record.state = "stopped"
            replica.record.pid = None
            replica.sock.close()
        self.write_state()

    async def _stop_processes(self, processes: list[subprocess.Popen[bytes]], deadline: float) -> None:
        """SIGTERM (a drain), then SIGKILL for what still runs at ``deadline``; then SIGKILL for
        every process the chainlets started that is still there (their process groups)."""
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        while any(p.poll() is None for p in processes) and time.monotonic() < deadline:
            await asyncio.sleep(_POLL_SEC)
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
            self._descendants.end(process.pid)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)
        control_path = control_socket_path(self.directory)
        control_path.unlink(missing_ok=True)  # left by a supervisor of this folder that was killed
        # The pid file first: a command that finds the socket not answering yet takes it for
        # stale only when this file names a process that is gone.
        self.write_pid_file()
        # Owner-only from the moment it exists (no chmod after, which another process could race).
        umask = os.umask(0o177)
        try:
            server = await asyncio.start_unix_server(self._control, path=str(control_path))
        finally:
            os.umask(umask)
        self.open_sockets()
        self._descendants.watch()
        for replica in self.replicas:
            self.start(replica)
        self.write_state()
        try:
            while not self.stopping:
                for replica in self.replicas:
                    await self._check(replica)
                self._descendants.sweep()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopped.wait(), _POLL_SEC)
        finally:
            server.close()
            await self._shutdown()
            self._descendants.close()
            control_path.unlink(missing_ok=True)


def _say(message: str) -> None:
    """A line to the supervisor's own log, which a full disk may refuse too."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    with contextlib.suppress(OSError):
        os.write(2, f"{stamp} supervisor: {message}\n".encode())


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.exit("usage: python -m chains.targets.supervisor DEPLOY_DIR")
    supervisor = Supervisor(Path(args[0]))
    asyncio.run(supervisor.run())


if __name__ == "__main__":
    main()
