"""What goes wrong with the docker target, and what the user is told: a chainlet that cannot
start, a failed re-push, a failed build, no engine, no docker SDK."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from chains.targets.docker_engine import Build, BuildFailed
from tests.docker.conftest import BASE_IMAGE, ROOT, Cli, dangling_images, remove_chain
from tests.helpers import write_chain

HELLO = ROOT / "examples" / "hello" / "chain.py"

CHAIN = """
    import chains

    BROKEN = {broken!r}


    class Leaf(chains.ChainletBase):
        def __init__(self) -> None:
            if BROKEN == "leaf":
                raise RuntimeError("leaf cannot start: the model file is missing")

        async def run_remote(self, text: str) -> str:
            return text.upper()


    @chains.mark_entrypoint("dk-fail")
    class Entry(chains.ChainletBase):
        def __init__(self, leaf: Leaf = chains.depends(Leaf)) -> None:
            if BROKEN == "entry":
                raise ValueError("entry refuses to start")
            self._leaf = leaf

        async def run_remote(self, text: str) -> str:
            return await self._leaf.run_remote(text)
"""


def _leftovers(engine: Any, deployment: str | None = None) -> tuple[list[Any], list[Any]]:
    labels = {"chains.chain": "dk-fail", **({"chains.deployment": deployment} if deployment else {})}
    label_filter = ",".join(f"{k}={v}" for k, v in labels.items())
    containers = engine.containers(labels)
    networks = engine.client.networks.list(filters={"label": label_filter.split(",")})
    return containers, networks


@pytest.mark.docker
def test_a_chainlet_that_cannot_start_fails_the_push_and_leaves_nothing(engine: Any, cli: Cli) -> None:
    remove_chain(engine, "dk-fail")
    file = write_chain(cli.home.parent / "broken", CHAIN.format(broken="leaf"))
    result = cli.run("push", str(file), "--target", "docker", "--timeout", "60", check=False)
    assert result.returncode == 1
    assert "chainlet Leaf failed to start: its container dk-fail-Leaf exited with code 3" in result.stderr
    assert "RuntimeError: leaf cannot start: the model file is missing" in result.stderr  # its log lines
    assert _leftovers(engine) == ([], [])
    assert "no chains are running" in cli.run("status").stdout
    assert not list((cli.home / "dk-fail" / "deployments").glob("*"))


@pytest.mark.docker
def test_a_failed_repush_keeps_the_running_chain(engine: Any, cli: Cli) -> None:
    remove_chain(engine, "dk-fail")
    folder = cli.home.parent / "chain"
    file = write_chain(folder, CHAIN.format(broken=""))
    pushed = json.loads(cli.run("push", str(file), "--target", "docker", "--json").stdout.splitlines()[-1])
    url = pushed["entrypoint_url"]
    deployment = cli.state("dk-fail")["deployment"]
    # The entrypoint itself fails: the old one had already handed its port over, and gets it back.
    write_chain(folder, CHAIN.format(broken="entry"))
    result = cli.run("push", str(file), "--target", "docker", "--timeout", "60", check=False)
    assert result.returncode == 1 and "ValueError: entry refuses to start" in result.stderr
    assert cli.state("dk-fail")["deployment"] == deployment
    deadline = time.monotonic() + 20
    while True:  # the old entrypoint starts again and is healthy within a few seconds
        try:
            answer = httpx.post(f"{url}/run_remote", json={"text": "still here"}, timeout=5)
            break
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    assert answer.json() == "STILL HERE"
    containers, networks = _leftovers(engine)
    assert {c.labels["chains.deployment"] for c in containers} == {deployment} and len(networks) == 1
    cli.run("stop", "dk-fail")
    assert _leftovers(engine) == ([], [])


@pytest.mark.docker
def test_a_failed_build_shows_its_output_and_leaves_no_dangling_image(engine: Any, tmp_path: Path) -> None:
    context = tmp_path / "context"
    context.mkdir()
    (context / "Dockerfile").write_text(
        f"FROM {BASE_IMAGE}\nRUN echo first layer > /first\nRUN echo second layer > /second\n"
        "RUN echo 'about to fail' && exit 7\n"
    )
    (tmp_path / "wheels").mkdir()
    sdk = tmp_path / "sdk.whl"
    sdk.write_bytes(b"not used by this Dockerfile")
    before = dangling_images(engine)
    labels = {"chains.chain": "dk-broken"}
    build = Build("Broken", "chains/dk-broken:test", context, tmp_path / "wheels", sdk, labels)
    with pytest.raises(BuildFailed) as failed:
        engine.build(build, lambda line: None, time.monotonic() + 120)
    message = str(failed.value)
    assert "the image of chainlet Broken did not build" in message
    assert "returned a non-zero code: 7" in message
    assert "about to fail" in message
    assert dangling_images(engine) <= before
    assert engine.image_id("chains/dk-broken:test") is None


def test_no_engine_is_a_clear_error(tmp_path: Path) -> None:
    env = {**os.environ, "CHAINS_HOME": str(tmp_path), "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    result = subprocess.run(
        [sys.executable, "-m", "chains", "push", str(HELLO), "--target", "docker"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 1
    assert f"no container engine answers at unix://{tmp_path}/no-engine.sock" in result.stderr
    assert "DOCKER_HOST" in result.stderr


def test_no_docker_sdk_names_the_extra(tmp_path: Path) -> None:
    # The SDK made unimportable in this one process, as if the extra were not installed.
    code = (
        "import sys; sys.modules['docker'] = None; "
        f"sys.argv = ['chains', 'push', {str(HELLO)!r}, '--target', 'docker']; "
        "from chains.cli import main; main()"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "CHAINS_HOME": str(tmp_path)},
        timeout=60,
    )
    assert result.returncode == 1
    assert "the docker target needs the docker SDK" in result.stderr
    assert "pip install 'chains-sdk[docker]'" in result.stderr


@pytest.mark.docker
def test_a_base_image_that_cannot_be_had_says_how_to_build_one(engine: Any, cli: Cli) -> None:
    # A registry on a closed port of this machine: the pull fails at once, and nothing leaves it.
    missing = "localhost:1/chains-missing:1"
    push = ["push", str(HELLO), "--name", "dk-nobase", "--target", "docker", "--base-image", missing]
    result = cli.run(*push, check=False)
    assert result.returncode == 1
    assert f"base image {missing} is not on the engine and cannot be pulled" in result.stderr
    assert "docker/build-base-image.sh" in result.stderr
    assert engine.containers({"chains.chain": "dk-nobase"}) == []
    assert not list((cli.home / "dk-nobase" / "deployments").glob("*"))
