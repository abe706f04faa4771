"""The ray target as a Ray user meets it, on the real two-node cluster: a push Serve cannot
place says why as Serve says it; ``chains status`` and ``chains ui`` show the replicas as Ray
runs them after a node is lost; a command without Ray's TLS settings against the TLS cluster
fails in seconds naming them; Ctrl-C ends a command waiting for a cluster that never answers."""

from __future__ import annotations

import collections
import json
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from chains.targets.ray import replicas
from chains.targets.ray_connect import TLS_VARIABLES
from tests import helpers
from tests.ray.cluster import HEAD_IP, WORKER_IP, RayCluster
from tests.ray.conftest import SAMPLES, Cli
from tests.ray.test_ray_target import _record, _routes

pytestmark = pytest.mark.ray

HUNGRY = SAMPLES / "hungry.py"
RELAY = SAMPLES / "relay.py"
PAIR = SAMPLES / "pair.py"
# Serve says that a replica cannot be placed once it has waited 30 s for it; the push waits longer.
UNPLACEABLE_TIMEOUT_SEC = 75
RESTORE_LIMIT_SEC = 120.0
# Bounds on commands that, before, waited for ever: generous on a loaded machine, never endless.
COMMAND_LIMIT_SEC = 60.0


def test_a_push_serve_cannot_place_says_why_as_serve_says_it_and_leaves_nothing(
    cli: Cli, ray_cluster: RayCluster
) -> None:
    done = cli.run(
        "push", str(HUNGRY), "--target", "ray", "--timeout", str(UNPLACEABLE_TIMEOUT_SEC), check=False,
        timeout=UNPLACEABLE_TIMEOUT_SEC + 120,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stderr.splitlines()
    said = [i for i, line in enumerate(lines) if line.startswith("ray-hungry.Hungry: Serve says: ")]
    assert said, done.stderr
    # Serve's own words: the resources each replica needs and what the cluster has.
    assert "to be scheduled" in lines[said[0]] and "'CPU': 6" in lines[said[0]].replace('"', "'"), lines[
        said[0]
    ]
    # Said while the push still waited (a summary line follows), not only when it gave up.
    assert any(line.startswith("waiting for ray-hungry.Hungry") for line in lines[said[0] + 1 :]), done.stderr
    error = done.stderr[done.stderr.index("error: ") :]
    assert f"not running after {UNPLACEABLE_TIMEOUT_SEC}s: ray-hungry.Hungry" in error
    assert "Serve says: " in error and "to be scheduled" in error
    assert "docs/deploy.md, Ray, Sizing" in error and "Compute(" in error
    # Nothing of the chain is left on Serve, nor in chains' state.
    assert not any(prefix.startswith("/ray-hungry/") for prefix in _routes(ray_cluster))
    assert "no chains are running" in cli.run("status").stdout


def _overview(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url.split("?")[0].rstrip("/") + "/api/overview", timeout=30) as response:
        answer: dict[str, object] = json.loads(response.read())
    return answer


def test_status_and_the_dashboard_show_the_replicas_where_serve_moved_them_after_a_node_is_lost(
    cli: Cli, ray_cluster: RayCluster
) -> None:
    cli.env["RELAY_EVERY_CHAINLET_TWICE"] = "1"
    cli.push(str(RELAY), "--secret", "relay_signature=moved")
    info = _record(cli.home, "ray-relay")
    dashboard, apps = str(info["dashboard_url"]), dict(info["apps"])  # type: ignore[call-overload]
    before = replicas(dashboard, apps)
    on_worker = collections.Counter(r.chainlet for r in before if r.node_ip == WORKER_IP)
    assert sum(on_worker.values()) > 0, before
    first = cli.run("status", "ray-relay").stdout
    assert "NODE" in first and WORKER_IP in first and HEAD_IP in first, first
    dead_pids = {r.pid for r in before if r.node_ip == WORKER_IP}

    try:
        ray_cluster.stop_node("worker")
        deadline = time.monotonic() + RESTORE_LIMIT_SEC
        while time.monotonic() < deadline:
            now = replicas(dashboard, apps)
            running = collections.Counter(
                r.chainlet for r in now if r.state == "RUNNING" and r.node_ip == HEAD_IP
            )
            if all(running[name] >= 2 for name in apps) and len(now) == 2 * len(apps):
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"Serve did not move the replicas within {RESTORE_LIMIT_SEC:.0f}s: {now}")

        state = json.loads(cli.run("status", "ray-relay", "--json").stdout)
        # Read from Ray now: every replica on the head, none of the lost node's processes, each
        # chainlet's restarts as many as it had replicas on the lost node.
        processes = state["processes"]
        assert len(processes) == 2 * len(apps), processes
        rows = [(p["chainlet"], p["node"], p["state"], p["pid"], p["restarts"]) for p in processes]
        assert {p["node"] for p in processes} == {HEAD_IP}, (rows, now, before)
        assert all(p["state"] == "ready" for p in processes), processes
        assert not dead_pids & {p["pid"] for p in processes}, processes
        restarts = collections.Counter[str]()
        for p in processes:
            restarts[p["chainlet"]] += p["restarts"]
        assert restarts == collections.Counter({name: on_worker[name] for name in apps}), processes
        table = cli.run("status", "ray-relay").stdout
        assert WORKER_IP not in table and table.count(" ready ") == len(processes), table
        listed = cli.run("status").stdout
        assert f"ray-relay  running  {len(processes)}/{len(processes)} ready" in listed, listed

        # The dashboard reads the same, live.
        with helpers.dashboard("ray-relay", cli.env) as url:
            overview = _overview(url)
        shown = overview["processes"]
        assert isinstance(shown, list)
        assert {p["node"] for p in shown} == {HEAD_IP}
        assert sorted((p["chainlet"], p["pid"], p["restarts"]) for p in shown) == sorted(
            (p["chainlet"], p["pid"], p["restarts"]) for p in processes
        )
    finally:
        if not ray_cluster.nodes["worker"].pid:
            ray_cluster.start_worker()


def test_the_pushs_curl_line_works_and_a_call_logs_one_line_on_ray(cli: Cli) -> None:
    out = cli.run("push", str(PAIR), "--target", "ray").stdout
    # The proxy's certificate is of the cluster's own authority: the line names it for curl.
    curl = next(line for line in out.splitlines() if line.startswith("try: curl"))
    assert " --cacert " in curl, curl
    tried = subprocess.run(
        curl.removeprefix("try: "), shell=True, capture_output=True, text=True, timeout=60, check=False
    )
    assert tried.returncode == 0 and json.loads(tried.stdout) == ["HELLO"], tried
    calls = 3
    for _ in range(calls - 1):
        answer = cli.run("call", "ray-pair", "--json", '{"text": "one line"}').stdout
        assert json.loads(answer) == ["ONE", "LINE"]
    logged = cli.run("logs", "ray-pair", "--lines", "10000").stdout.splitlines()
    # Per call, Entry's line and Upper's: chains' own; none of Serve's access lines (`-- POST /...`).
    assert sum("chains.requests: Entry 200" in line for line in logged) == calls, logged
    assert sum("chains.requests: Upper 200" in line for line in logged) == calls, logged
    assert not [line for line in logged if " -- POST " in line or " -- GET " in line], logged


def _without_tls(env: dict[str, str]) -> dict[str, str]:
    return {name: value for name, value in env.items() if name not in TLS_VARIABLES}


def test_a_command_without_rays_tls_settings_fails_in_seconds_naming_them(
    cli: Cli, ray_cluster: RayCluster
) -> None:
    cli.push(str(PAIR))
    with_tls = dict(cli.env)
    cli.env = _without_tls(with_tls)
    for command in (["stop", "ray-pair"], ["push", str(PAIR), "--target", "ray"]):
        done = cli.run(*command, check=False, timeout=COMMAND_LIMIT_SEC)
        assert done.returncode == 1, done.stdout + done.stderr
        assert f"the Ray cluster at '{ray_cluster.address}' speaks TLS" in done.stderr, done.stderr
        assert all(name in done.stderr for name in TLS_VARIABLES), done.stderr
        assert "Traceback" not in done.stderr
    # The refused stop left the chain running, and with the settings it stops.
    assert "/ray-pair/Entry" in _routes(ray_cluster)
    cli.env = with_tls
    stopped = cli.run("stop", "ray-pair")
    assert "serve shutdown" in stopped.stderr, stopped.stderr
    assert not any(prefix.startswith("/ray-pair/") for prefix in _routes(ray_cluster))


@pytest.fixture
def silent_gcs() -> Iterator[tuple[str, list[socket.socket]]]:
    """A listener on loopback that takes connections and never answers: a GCS that hangs."""
    # Not 127.0.0.1, which Ray replaces with the machine's address (tests/ray/cluster.py).
    server = socket.create_server(("127.0.0.4", helpers.unique_port()))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        host, port = server.getsockname()[:2]
        yield f"{host}:{port}", accepted
    finally:
        stop.set()
        thread.join(5)
        for conn in accepted:
            conn.close()
        server.close()


def test_ctrl_c_ends_a_push_waiting_for_a_cluster_that_never_answers(
    tmp_path: Path, ray_cluster: RayCluster, silent_gcs: tuple[str, list[socket.socket]]
) -> None:
    address, accepted = silent_gcs
    env = _without_tls(dict(Cli(tmp_path / "home", ray_cluster).env))
    env.pop("RAY_ADDRESS", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "chains", "push", str(PAIR), "--target", "ray", "--address", address],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # Whatever the test runner ignores, the command starts with Ctrl-C's usual handling.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + COMMAND_LIMIT_SEC
        # The TLS question, then Ray's own connection: the push now waits inside ray.init.
        while len(accepted) < 2 and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert process.poll() is None and len(accepted) >= 2, process.communicate(timeout=5)
        time.sleep(1.0)
        process.send_signal(signal.SIGINT)
        try:
            out, err = process.communicate(timeout=COMMAND_LIMIT_SEC / 2)
        except subprocess.TimeoutExpired:
            pytest.fail("chains push ignored Ctrl-C while connecting to the cluster")
        assert process.returncode != 0, out + err
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    assert not (tmp_path / "home" / "ray-pair" / "state.json").exists()
