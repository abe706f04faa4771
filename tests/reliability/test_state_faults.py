"""Faults of the local runtime's own bookkeeping: nothing of a chain may outlive `chains stop`.

Each test pushes a chain with the real command line, breaks something under it (two pushes
at once, a truncated or deleted state file, a supervisor killed with SIGKILL, a full disk, a
pid given to another process), and then checks, by scanning processes and listening ports,
that `chains stop` leaves nothing running. The scan looks only at processes this test
started and their descendants: each carries a mark in its environment, which every process
it starts inherits (other chains may run on the machine at the same time).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from chains.targets.local import control
from chains.targets.state import chain_lock, process_identity, same_process
from chains.targets.supervisor import control_socket_path
from tests.helpers import Cli, wait_until
from tests.reliability.conftest import SAMPLE, record

ENTRY = "UnaryEntry"  # UnaryEntry -> Doubler: two processes under one supervisor


class Marked:
    """The ``chains`` command line with a mark of this test in its environment, and the scan
    for the processes (and their listening ports) that carry it."""

    def __init__(self, home: Path) -> None:
        self.mark = secrets.token_hex(8)
        self.cli = Cli(home, env={"CHAINS_TEST_MARK": self.mark})

    def push(self, name: str, *args: str) -> dict[str, object]:
        return self.cli.push(str(SAMPLE), "--entrypoint", ENTRY, "--name", name, *args)

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "chains", *args],
            env=self.cli.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def pids(self) -> set[int]:
        """Every live (not zombie) process carrying this test's mark."""
        needle = f"CHAINS_TEST_MARK={self.mark}".encode()
        found = set()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if needle not in (entry / "environ").read_bytes().split(b"\0"):
                    continue
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue  # gone meanwhile
            if state != "Z":
                found.add(int(entry.name))
        return found

    def ports(self, pids: set[int] | None = None) -> set[int]:
        """The TCP ports the marked processes listen on."""
        inodes = set()
        for pid in self.pids() if pids is None else pids:
            with contextlib.suppress(OSError):
                for fd in Path(f"/proc/{pid}/fd").iterdir():
                    with contextlib.suppress(OSError):
                        target = os.readlink(fd)
                        if target.startswith("socket:["):
                            inodes.add(target[8:-1])
        ports = set()
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            with contextlib.suppress(OSError):
                for line in Path(table).read_text().splitlines()[1:]:
                    fields = line.split()
                    if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                        ports.add(int(fields[1].rsplit(":", 1)[1], 16))
        return ports

    def leftovers(self) -> tuple[set[int], set[int]]:
        pids = self.pids()
        return pids, self.ports(pids)

    def cleanup(self) -> None:
        """Stop what a failed test left, then kill (by pid) whatever carries the mark."""
        for folder in self.cli.home.iterdir() if self.cli.home.is_dir() else []:
            self.cli.run("stop", folder.name, "--grace", "2", check=False)
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def marked(tmp_path: Path) -> Iterator[Marked]:
    tool = Marked(tmp_path / "home")
    yield tool
    tool.cleanup()


def live_state(tool: Marked, name: str) -> dict[str, object]:
    """The chain's state as `chains status --json` prints it."""
    return tool.cli.state(name)


def chain_pids(state: dict[str, object]) -> set[int]:
    processes = state["processes"]
    assert isinstance(processes, list)
    local = state["local"]
    assert isinstance(local, dict)
    # the supervisor and its reaper (chains/targets/reaper.py)
    supervisor = {int(local["supervisor_pid"]), int(local["reaper_pid"])}
    return supervisor | {int(p["pid"]) for p in processes if p["pid"]}


def chain_ports(state: dict[str, object]) -> set[int]:
    processes = state["processes"]
    assert isinstance(processes, list)
    return {int(p["port"]) for p in processes}


def assert_stop_leaves_nothing(tool: Marked, name: str) -> dict[str, int]:
    """`chains stop NAME`, then no marked process and no marked listening port."""
    before_pids, before_ports = tool.leftovers()
    started = time.monotonic()
    result = tool.cli.run("stop", name)
    took = time.monotonic() - started
    assert "Traceback" not in result.stderr
    # A process exits a moment after its last signal: bounded wait for the scan to be empty.
    wait_until(lambda: not tool.pids(), 10, f"no process of chain {name} left: {tool.leftovers()}")
    pids, ports = tool.leftovers()
    assert not pids and not ports
    return {
        "pids_before_stop": len(before_pids),
        "ports_before_stop": len(before_ports),
        "stop_ms": round(took * 1000),
    }


def entry_answers(state: dict[str, object], x: int = 21) -> bool:
    response = httpx.post(f"{state['entrypoint_url']}/run_remote", json={"x": x}, timeout=10)
    return response.status_code == 200 and response.json() == 2 * x


# -- two pushes at once -------------------------------------------------------------------------


def test_two_pushes_of_one_name_at_once_leave_one_deployment_that_stop_stops(marked: Marked) -> None:
    name = "twice"
    args = ("push", str(SAMPLE), "--entrypoint", ENTRY, "--name", name, "--json")
    started = time.monotonic()
    first, second = marked.popen(*args), marked.popen(*args)
    outputs = [p.communicate(timeout=180) for p in (first, second)]
    took = time.monotonic() - started
    assert first.returncode == 0 and second.returncode == 0, outputs
    urls = [json.loads(out.splitlines()[-1])["entrypoint_url"] for out, _ in outputs]
    state = live_state(marked, name)
    # The second push waited for the first and replaced it: one deployment runs, the one
    # the state names, on the URL both pushes reported (the port is kept across pushes).
    assert urls[0] == urls[1] == state["entrypoint_url"]
    wait_until(lambda: marked.pids() == chain_pids(state), 20, "only the current deployment's processes")
    assert marked.ports() == chain_ports(state)
    deployments = list((marked.cli.home / name / "deployments").iterdir())
    assert [d.name for d in deployments] == [state["deployment"]]
    assert entry_answers(state)
    figures = assert_stop_leaves_nothing(marked, name)
    record(
        "test_two_pushes_of_one_name_at_once",
        both_pushes_s=round(took, 2),
        deployments_after=len(deployments),
        processes_running=len(chain_pids(state)),
        **figures,
    )


def test_a_push_waiting_for_the_lock_gives_up_naming_the_holder(
    marked: Marked, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHAINS_HOME", str(marked.cli.home))
    marked.cli.env["CHAINS_LOCK_WAIT_SEC"] = "1"
    with chain_lock("held", wait=0):
        result = marked.cli.run("push", str(SAMPLE), "--entrypoint", ENTRY, "--name", "held", check=False)
    assert result.returncode == 1
    assert f"pid {os.getpid()}" in result.stderr and "Traceback" not in result.stderr
    assert not marked.pids()


# -- a lost state file ----------------------------------------------------------------------------


def test_a_truncated_state_file_hides_nothing_from_status_push_and_stop(marked: Marked) -> None:
    name = "truncated"
    marked.push(name)
    old = live_state(marked, name)
    link = marked.cli.home / name / "state.json"
    text = link.read_bytes()
    link.write_bytes(text[: len(text) // 2])  # through the link: the deployment's own file
    # status asks the running supervisor instead.
    shown = marked.cli.run("status", name)
    assert "Doubler" in shown.stdout and "stale" not in shown.stderr
    # A re-push replaces the deployment it cannot read about.
    marked.push(name)
    new = live_state(marked, name)
    assert new["deployment"] != old["deployment"]
    wait_until(lambda: marked.pids() == chain_pids(new), 20, "only the new deployment's processes")
    assert not chain_pids(old) & marked.pids()
    # And a stop of a chain whose state file is garbage stops it.
    link.write_text('{"chain": "trunc')
    figures = assert_stop_leaves_nothing(marked, name)
    record("test_a_truncated_state_file", old_processes_left_after_repush=0, **figures)


def test_a_deleted_state_file_hides_nothing_from_status_push_and_stop(marked: Marked) -> None:
    name = "deleted"
    marked.push(name)
    old = live_state(marked, name)
    home = marked.cli.home / name
    (home / "state.json").unlink()
    listed = marked.cli.run("status")
    assert listed.stdout.startswith(name) and "running" in listed.stdout
    marked.push(name)
    new = live_state(marked, name)
    wait_until(lambda: marked.pids() == chain_pids(new), 20, "only the new deployment's processes")
    assert not chain_pids(old) & marked.pids()
    # Everything a command could find the supervisor by, gone but its pid file: the state
    # file, the deployment's own state, and its control socket.
    deploy_dir = home / "deployments" / str(new["deployment"])
    (home / "state.json").unlink()
    (deploy_dir / "state.json").unlink()
    control_socket_path(deploy_dir).unlink()
    figures = assert_stop_leaves_nothing(marked, name)
    record("test_a_deleted_state_file", old_processes_left_after_repush=0, **figures)


# -- the supervisor killed ----------------------------------------------------------------------


def test_a_killed_supervisor_takes_its_chainlets_and_leaves_no_stale_socket(marked: Marked) -> None:
    name = "orphans"
    marked.push(name)
    state = live_state(marked, name)
    chainlets = chain_pids(state) - {int(state["local"][key]) for key in ("supervisor_pid", "reaper_pid")}  # type: ignore[call-overload]
    deploy_dir = marked.cli.home / name / "deployments" / str(state["deployment"])
    socket_path = control_socket_path(deploy_dir)
    killed = time.monotonic()
    os.kill(int(state["local"]["supervisor_pid"]), signal.SIGKILL)  # type: ignore[call-overload]
    wait_until(lambda: not chainlets & marked.pids(), 10, "the chainlets die with their supervisor")
    died_within = time.monotonic() - killed
    assert not marked.ports()
    assert socket_path.exists()  # a killed supervisor cannot remove it; the next command does
    assert "stale" in marked.cli.run("status", name).stderr
    assert not socket_path.exists()
    marked.push(name)
    assert entry_answers(live_state(marked, name))
    figures = assert_stop_leaves_nothing(marked, name)
    record(
        "test_a_killed_supervisor_takes_its_chainlets",
        chainlets=len(chainlets),
        chainlets_gone_within_ms=round(died_within * 1000),
        **figures,
    )


def test_stop_never_signals_a_process_that_took_a_recorded_pid(marked: Marked) -> None:
    name = "reused"
    marked.push(name)
    state = live_state(marked, name)
    os.kill(int(state["local"]["supervisor_pid"]), signal.SIGKILL)  # type: ignore[call-overload]
    wait_until(lambda: not marked.pids(), 10, "the chain is gone with its supervisor")
    # Another process now has the pids the state records (as after pid reuse).
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        deploy_dir = marked.cli.home / name / "deployments" / str(state["deployment"])
        recorded = json.loads((deploy_dir / "state.json").read_text())
        recorded["local"]["supervisor_pid"] = stranger.pid
        for process in recorded["processes"]:
            process["pid"] = stranger.pid
        (deploy_dir / "state.json").write_text(json.dumps(recorded))
        assert not same_process(stranger.pid, recorded["local"]["supervisor_identity"])
        marked.cli.run("stop", name, "--grace", "1")
        time.sleep(0.5)  # a SIGTERM sent by stop would have ended `sleep` by now
        assert stranger.poll() is None, "stop signalled a process it did not start"
        assert process_identity(stranger.pid) is not None
    finally:
        stranger.kill()
        stranger.wait()


# -- a full disk, a read-only home -----------------------------------------------------------


@contextlib.contextmanager
def small_disk(folder: Path, size: str) -> Iterator[Path]:
    folder.mkdir(parents=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (root and CAP_SYS_ADMIN needed): {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "--lazy", str(folder)], check=False)


def fill(folder: Path, name: str = "filler") -> Path:
    """Fill the disk under ``folder`` to the last byte."""
    filler = folder / name
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for size in (1 << 20, 4096, 1):
            with contextlib.suppress(OSError):
                while os.write(fd, b"\0" * size) == size:
                    pass
    finally:
        os.close(fd)
    return filler


def test_a_full_disk_keeps_the_supervisor_supervising_and_push_says_so(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", "24m") as disk:
        tool = Marked(disk / "home")
        try:
            name = "full"
            tool.push(name)
            state = live_state(tool, name)
            deploy_dir = tool.cli.home / name / "deployments" / str(state["deployment"])
            doubler = next(p for p in state["processes"] if p["chainlet"] == "Doubler")  # type: ignore[attr-defined]
            filler = fill(disk)
            # A crash while the disk is full: the state write fails, the restart happens.
            os.kill(int(doubler["pid"]), signal.SIGKILL)

            def restarted() -> bool:
                answer = control(deploy_dir, {"cmd": "state"}, timeout=10)
                now = answer["state"]["processes"]  # type: ignore[index]
                entry = next(p for p in now if p["chainlet"] == "Doubler")
                return bool(entry["restarts"] == 1 and entry["state"] == "ready" and answer["write_error"])

            killed = time.monotonic()
            wait_until(restarted, 30, "Doubler restarted while the state file cannot be written")
            restart_s = time.monotonic() - killed
            assert entry_answers(state)
            # The state file on disk is stale (the old pid): stop still stops all of it.
            stopped = time.monotonic()
            tool.cli.run("stop", name)
            wait_until(lambda: not tool.pids(), 10, f"nothing left: {tool.leftovers()}")
            stop_s = time.monotonic() - stopped
            assert not tool.ports()
            # A push on the full disk (full again: the stop freed the deployment's folder): a
            # clear error naming the folder, nothing started.
            refiller = fill(disk, "refiller")
            failed = tool.cli.run("push", str(SAMPLE), "--entrypoint", ENTRY, "--name", name, check=False)
            assert failed.returncode == 1 and "Traceback" not in failed.stderr, failed.stderr
            assert "the disk is full" in failed.stderr and str(tool.cli.home) in failed.stderr
            assert not tool.pids()
            filler.unlink()
            refiller.unlink()
            record(
                "test_a_full_disk",
                disk="tmpfs 24 MiB",
                restart_with_full_disk_s=round(restart_s, 2),
                stop_with_full_disk_s=round(stop_s, 2),
                push_error=failed.stderr.strip().splitlines()[-1],
            )
        finally:
            tool.cleanup()


def test_a_read_only_home_gives_a_clear_error(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", "4m") as disk:
        tool = Marked(disk / "home")
        tool.cli.home.mkdir()
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        failed = tool.cli.run("push", str(SAMPLE), "--entrypoint", ENTRY, "--name", "ro", check=False)
        assert failed.returncode == 1 and "Traceback" not in failed.stderr, failed.stderr
        assert "read-only" in failed.stderr and str(tool.cli.home) in failed.stderr
        assert not tool.pids()


# -- names, hang-ups ---------------------------------------------------------------------------


def test_a_300_character_name_is_refused_with_a_message(marked: Marked) -> None:
    name = "a" * 300
    for args in (("push", str(SAMPLE), "--entrypoint", ENTRY, "--name", name), ("stop", name)):
        result = marked.cli.run(*args, check=False)
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
        assert "300 characters long; at most 63" in result.stderr
    assert not marked.pids()


def test_sighup_to_push_watch_stops_what_it_started(marked: Marked) -> None:
    name = "hangup"
    watcher = marked.popen("push", str(SAMPLE), "--entrypoint", ENTRY, "--name", name, "--watch")
    lines: list[str] = []
    assert watcher.stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(watcher.stdout or []), daemon=True)
    reader.start()
    try:
        wait_until(lambda: any(line.startswith("watching") for line in lines), 90, "the watch to start")
        assert len(chain_pids(live_state(marked, name))) == 4  # supervisor, reaper, two chainlets
        hung_up = time.monotonic()
        watcher.send_signal(signal.SIGHUP)
        assert watcher.wait(60) == 0
        took = time.monotonic() - hung_up
        wait_until(lambda: not marked.pids(), 10, f"nothing left: {marked.leftovers()}")
        assert not marked.ports()
        assert "no chain named" in marked.cli.run("status", name, check=False).stderr
        record("test_sighup_to_push_watch", stopped_within_s=round(took, 2))
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()


def _as_nohup_in_the_background() -> None:
    """What `nohup chains push --watch &` from a script leaves a process: SIGHUP ignored (nohup)
    and SIGINT ignored (a shell's `&` without job control), inherited across exec."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_sigint_stops_push_watch_started_with_sigint_ignored(marked: Marked) -> None:
    name = "nohup"
    push = ["push", str(SAMPLE), "--entrypoint", ENTRY, "--name", name, "--watch"]
    watcher = subprocess.Popen(
        [sys.executable, "-m", "chains", *push],
        env=marked.cli.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=_as_nohup_in_the_background,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(watcher.stdout or []), daemon=True)
    reader.start()
    try:
        wait_until(lambda: any(line.startswith("watching") for line in lines), 90, "the watch to start")
        assert len(chain_pids(live_state(marked, name))) == 4  # supervisor, reaper, two chainlets
        # Under nohup a hang-up is what it is told to outlive: the chain keeps running.
        watcher.send_signal(signal.SIGHUP)
        assert marked.cli.run("status", name).returncode == 0
        assert watcher.poll() is None
        asked = time.monotonic()
        watcher.send_signal(signal.SIGINT)  # before: ignored, so the watch and its chain ran on
        assert watcher.wait(60) == 0, "".join(lines)
        took = time.monotonic() - asked
        wait_until(lambda: not marked.pids(), 10, f"nothing left: {marked.leftovers()}")
        assert "no chain named" in marked.cli.run("status", name, check=False).stderr
        record("test_sigint_to_push_watch_under_nohup", stopped_within_s=round(took, 2))
    finally:
        if watcher.poll() is None:
            watcher.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                watcher.wait(30)
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()
