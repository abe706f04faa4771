"""Generated servers import and build their app from anywhere; one serves real requests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from chains_codegen import GeneratedChain
from tests.codegen.conftest import EXAMPLES, descriptor
from tests.helpers import unique_port

# Builds each chainlet's app in turn, each in a clean import state, from the directory given.
_BUILD_APPS = """
import json, os, runpy, sys
import chains.server.serve  # once: only the chainlet's own modules are forgotten between apps
saved_path, saved_modules = list(sys.path), set(sys.modules)
for directory, env in json.loads(sys.argv[1]):
    os.environ.update(env)
    app = runpy.run_path(os.path.join(directory, "server.py"))["app"]
    print(app.spec.name)
    for key in env:
        del os.environ[key]
    sys.path[:] = saved_path
    for name in set(sys.modules) - saved_modules:
        del sys.modules[name]
"""


def _server_env(directory: Path) -> dict[str, str]:
    """What a deploy target would set: dependency URLs, and the token or the entrypoint flag."""
    info = descriptor(directory)
    urls = {d["chainlet"]: ["http://127.0.0.1:1"] for d in info["dependencies"]}
    env = {"CHAINS_DEPENDENCY_URLS": json.dumps(urls)}
    env.update({"CHAINS_IS_ENTRYPOINT": "1"} if info["is_entrypoint"] else {"CHAINS_INTERNAL_TOKEN": "x"})
    return env


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_each_generated_server_builds_its_app(
    example: str, generated: dict[str, GeneratedChain], tmp_path: Path
) -> None:
    chainlets = generated[example].chainlets
    env = dict(os.environ)
    for key in list(env):
        if key.startswith("CHAINS_"):
            del env[key]
    jobs = [(str(c.directory.resolve()), _server_env(c.directory)) for c in chainlets.values()]
    # From a directory that is not the chain's, with the repository not on sys.path.
    done = subprocess.run(
        [sys.executable, "-c", _BUILD_APPS, json.dumps(jobs)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == list(chainlets)


def test_generated_greeter_serves_a_call_and_stops_cleanly(
    generated: dict[str, GeneratedChain], tmp_path: Path
) -> None:
    directory = generated["hello"].chainlets["Greeter"].directory.resolve()
    port = unique_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHAINS_")}
    env["CHAINS_INTERNAL_TOKEN"] = "t"
    process = subprocess.Popen(
        [sys.executable, str(directory / "server.py"), "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 10
        ready = False
        while time.monotonic() < deadline and process.poll() is None:
            try:
                ready = httpx.get(f"{base}/readyz", timeout=1).status_code == 200
            except httpx.TransportError:
                ready = False
            if ready:
                break
            time.sleep(0.1)
        assert ready, "the server did not become ready within 10 s"
        response = httpx.post(
            f"{base}/run_remote", json={"name": "Ada"}, headers={"Authorization": "Bearer t"}, timeout=5
        )
        assert response.status_code == 200, response.text
        assert response.json() == "Hello, Ada!"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=5)
        if process.stdout is not None:
            process.stdout.close()
