"""``docker/start-engine.sh --stop`` leaves nothing behind: no process, no mount, no folder.

An engine that ran a ``--network host`` container keeps its network namespace mounted under
its exec root; a stop that did not undo it left the folder (and hundreds of MB) behind on
every CI run. Each test here starts an engine of its own in a folder of its own and stops
only that one: other engines on the machine are never touched.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.docker.conftest import BASE_IMAGE, ROOT, unavailable
from tests.docker.host_state import changes, host_state
from tests.helpers import unique_port, wait_until

SCRIPT = ROOT / "docker" / "start-engine.sh"


def mounts_under(folder: Path) -> list[str]:
    """Mount points at or under ``folder`` (mountinfo's fifth field, octal escapes decoded)."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        raw = line.split(" ")[4]
        path = raw.encode().decode("unicode_escape")  # "\040" is a blank
        if path == str(folder) or path.startswith(f"{folder}/"):
            found.append(path)
    return found


def processes_naming(folder: Path) -> list[int]:
    """Pids whose command line names ``folder`` (this engine's dockerd, containerd, shims)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if f"{folder}/".encode() in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
        except OSError:  # it ended meanwhile
            continue
    return found


def stop(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), "--stop", str(folder)], capture_output=True, text=True, timeout=120, check=False
    )


def docker(host: str, *args: str, timeout: float = 120, **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "DOCKER_HOST": host}
    return subprocess.run(["docker", *args], env=env, capture_output=True, timeout=timeout, **kwargs)


def load_base_image(host: str) -> None:
    """The base image, copied from the session's engine into the engine at ``host``."""
    session_host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    with subprocess.Popen(
        ["docker", "save", BASE_IMAGE],
        stdout=subprocess.PIPE,
        env={**os.environ, "DOCKER_HOST": session_host},
    ) as saved:
        loaded = docker(host, "load", "-q", stdin=saved.stdout)
        assert saved.wait(timeout=120) == 0
    assert loaded.returncode == 0, loaded.stderr


def engine_folder() -> Path:
    # Short: the engine's sockets live in it, and socket paths are limited to 107 bytes.
    return Path(tempfile.mkdtemp(prefix="chains-engine-", dir="/tmp")).resolve()


@pytest.fixture
def own_engine(engine: Any) -> Iterator[tuple[Path, str]]:
    """A second engine, started by the script in a folder of the test's own, holding the base
    image copied from the session's engine: (folder, its DOCKER_HOST)."""
    if os.geteuid() != 0 or shutil.which("dockerd") is None or shutil.which("docker") is None:
        unavailable("starting an engine needs root, dockerd and the docker command")
    folder = engine_folder()
    try:
        started = subprocess.run([str(SCRIPT), str(folder)], capture_output=True, text=True, timeout=90)
        assert started.returncode == 0, started.stderr
        host = started.stdout.strip().removeprefix("export DOCKER_HOST=")
        assert host == f"unix://{folder}/docker.sock"
        load_base_image(host)
        yield folder, host
    finally:
        if folder.exists():  # the test failed before its own --stop: clean up, loudly
            result = stop(folder)
            assert result.returncode == 0, result.stderr


def _run_host_network_container(host: str, folder: Path) -> None:
    ran = docker(host, "run", "--rm", "--network", "host", BASE_IMAGE, "python3", "-c", "print('up')")
    assert ran.returncode == 0 and ran.stdout == b"up\n", ran.stderr
    # What used to be left behind: the engine's network namespace, mounted in its folder.
    assert any("/netns/" in path for path in mounts_under(folder)), mounts_under(folder)


@pytest.mark.docker
def test_stop_after_a_host_network_container_leaves_no_mount_process_or_folder(
    own_engine: tuple[Path, str],
) -> None:
    folder, host = own_engine
    _run_host_network_container(host, folder)
    dockerd = int((folder / "dockerd.pid").read_text())
    result = stop(folder)
    assert result.returncode == 0, result.stderr
    assert mounts_under(folder) == []
    assert not folder.exists()
    assert not Path(f"/proc/{dockerd}").exists()
    assert processes_naming(folder) == []
    assert stop(folder).returncode == 0  # stopping again is nothing to do


@pytest.mark.docker
def test_stop_after_the_engine_was_killed_stops_what_it_left_and_cleans_up(
    own_engine: tuple[Path, str],
) -> None:
    folder, host = own_engine
    _run_host_network_container(host, folder)
    # A long-running container too, so its shim is among what a killed dockerd leaves behind.
    started = docker(host, "run", "-d", "--network", "host", BASE_IMAGE, "sleep", "300")
    assert started.returncode == 0, started.stderr
    dockerd = int((folder / "dockerd.pid").read_text())
    os.kill(dockerd, signal.SIGKILL)
    wait_until(lambda: not Path(f"/proc/{dockerd}").exists(), 10, "dockerd gone after SIGKILL")
    assert processes_naming(folder), "nothing of the engine outlived dockerd: the test tests nothing"
    result = stop(folder)
    assert result.returncode == 0, result.stderr
    assert mounts_under(folder) == []
    assert not folder.exists()
    assert processes_naming(folder) == []


def test_stop_refuses_a_folder_that_holds_no_engine(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    result = stop(tmp_path)
    assert result.returncode == 1
    refused = f"{tmp_path} holds no engine (no dockerd.log, no x/); nothing was stopped or removed"
    assert refused in result.stderr
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_stop_fails_loudly_when_the_folder_cannot_be_removed(tmp_path: Path) -> None:
    folder = tmp_path / "engine"
    folder.mkdir()
    (folder / "dockerd.log").write_text("")
    stuck = folder / "stuck"
    stuck.write_text("")
    if os.geteuid() != 0 or subprocess.run(["chattr", "+i", str(stuck)], capture_output=True).returncode:
        pytest.skip("needs root and a file system with immutable files (chattr +i)")
    try:
        result = stop(folder)
    finally:
        subprocess.run(["chattr", "-i", str(stuck)], check=True)
    assert result.returncode == 1
    assert f"error: {folder} could not be removed" in result.stderr
    assert "stuck" in result.stderr  # rm's own words name what is left


def _publish_a_port(host: str) -> None:
    """A network of the engine's own and a container publishing a port on it: the engine's
    bridge rules, its nat rules, and the jumps into its chains."""
    made = docker(host, "network", "create", "chains-teardown")
    assert made.returncode == 0, made.stderr
    ran = docker(
        host, "run", "-d", "--network", "chains-teardown", "-p", f"127.0.0.1:{unique_port()}:8000",
        BASE_IMAGE, "sleep", "300",
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr


@pytest.mark.docker
def test_stop_puts_back_the_firewall_forwarding_and_mounts_of_a_namespace_it_had_alone(
    engine: Any,
) -> None:
    """An engine alone in its network namespace: what it changed there (its chains, their jumps,
    FORWARD's policy, forwarding) is all undone by --stop, as on a machine with no other engine."""
    if os.geteuid() != 0 or shutil.which("dockerd") is None or shutil.which("nsenter") is None:
        unavailable("starting an engine in a network namespace needs root, dockerd, unshare and nsenter")
    # A namespace held by a process of the test's own (not `ip netns add`, which would mount
    # /run/netns on this machine).
    holder = subprocess.Popen(["unshare", "--net", "sleep", "600"])
    netns = Path(f"/proc/{holder.pid}/ns/net")
    host_net = os.readlink("/proc/self/ns/net")
    wait_until(lambda: os.readlink(netns) != host_net, 10, "the namespace of the test's own")
    inside = ["nsenter", f"--net={netns}"]
    folder = engine_folder()
    try:
        # Forwarding off, as on a machine that never ran an engine: the engine then also sets
        # FORWARD's policy to DROP.
        subprocess.run([*inside, "sysctl", "-qw", "net.ipv4.ip_forward=0"], check=True, timeout=30)
        subprocess.run([*inside, "ip", "link", "set", "lo", "up"], check=True, timeout=30)
        before = host_state(netns)
        started = subprocess.run(
            [*inside, str(SCRIPT), str(folder)], capture_output=True, text=True, timeout=90
        )
        assert started.returncode == 0, started.stderr
        host = started.stdout.strip().removeprefix("export DOCKER_HOST=")
        load_base_image(host)
        _publish_a_port(host)
        changed = changes(before, host_state(netns))
        for expected in ("+ filter -N DOCKER", "+ nat -N DOCKER", "+ nat -A DOCKER", "forwarding: 0 -> 1"):
            assert any(line.startswith(expected) for line in changed), changed
        assert "+ filter -P FORWARD DROP" in changed, changed

        stopped = subprocess.run(
            [*inside, str(SCRIPT), "--stop", str(folder)], capture_output=True, text=True, timeout=120
        )
        assert stopped.returncode == 0, stopped.stderr
        assert changes(before, host_state(netns)) == []
    finally:
        if folder.exists():
            subprocess.run([*inside, str(SCRIPT), "--stop", str(folder)], timeout=120, check=False)
        holder.kill()
        holder.wait(timeout=30)


@pytest.mark.docker
def test_stop_beside_another_engine_leaves_this_namespace_as_it_was(engine: Any) -> None:
    """Beside the session's engine, which shares the chains and the policy: --stop removes this
    engine's bridges, their rules and the jumps it added, and leaves the rest to that engine."""
    if os.geteuid() != 0 or shutil.which("dockerd") is None:
        unavailable("starting an engine needs root and dockerd")
    before = host_state()
    folder = engine_folder()
    try:
        started = subprocess.run([str(SCRIPT), str(folder)], capture_output=True, text=True, timeout=90)
        assert started.returncode == 0, started.stderr
        host = started.stdout.strip().removeprefix("export DOCKER_HOST=")
        load_base_image(host)
        _publish_a_port(host)
        assert any(line.startswith("+ filter -A FORWARD -o br-") for line in changes(before, host_state()))
        stopped = stop(folder)
        assert stopped.returncode == 0, stopped.stderr
        assert changes(before, host_state()) == []
    finally:
        if folder.exists():
            stop(folder)
