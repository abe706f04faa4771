"""The compose export run for real: ``docker compose up`` (or v1 ``docker-compose``) on a real engine.

As docs/deploy.md tells a user: ``chains push --target docker`` builds and tags the images,
``chains push --target compose --dry-run --out DIR`` writes ``compose.yaml``, ``.env`` is filled
in from ``.env.example``, and ``up -d`` starts the chain. The images are used as built
(``--no-build``), so a compose file naming images the docker target did not tag fails here.

Compose v2 (``docker compose``) is used when the engine's CLI has it, else Compose v1
(``docker-compose``, Debian's package). v1 does not know the top-level ``name`` of the Compose
specification and refuses the whole file for it; ``-p`` names the project in both, so for v1
only that one key is left out of the file it reads.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.docker.conftest import ROOT, Cli, remove_chain, unavailable
from tests.helpers import unique_port

pytestmark = pytest.mark.docker

UP_TIMEOUT_SEC = 180.0  # `up -d`: it waits for every dependency to be healthy first
READY_TIMEOUT_SEC = 90.0  # then for the entrypoint to answer /readyz on its published port
CALL_TIMEOUT_SEC = 30.0


@dataclass(frozen=True)
class Compose:
    command: tuple[str, ...]
    v1: bool


def _version(command: list[str]) -> str | None:
    """What ``command version --short`` prints (``1.29.2``, ``2.27.0``, ``v2.27.0``), if it runs."""
    if shutil.which(command[0]) is None:
        return None
    try:
        result = subprocess.run(
            [*command, "version", "--short"],
            capture_output=True,
            text=True,
            timeout=30,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip().removeprefix("v") if result.returncode == 0 else None


@pytest.fixture(scope="session")
def compose_command(engine: Any) -> Compose:
    """Compose v2 when the docker CLI has it, else ``docker-compose`` (v1, or v2 installed standalone)."""
    for command in (["docker", "compose"], ["docker-compose"]):
        version = _version(command)
        if version:
            return Compose(tuple(command), v1=version.startswith("1."))
    unavailable("no compose command: neither `docker compose` (v2) nor `docker-compose` (v1) runs")
    raise AssertionError("unreachable")


def _filled_env(example: str, values: dict[str, str]) -> str:
    """``.env.example`` with every variable filled in, as the user is told to do; the job store
    left empty, its default (SQLite on the project's volume)."""
    lines = []
    for line in example.splitlines():
        if line and not line.startswith("#"):
            name = line.split("=", 1)[0]
            value = "" if name == "CHAINS_JOBS_STORE" else values.get(name) or secrets.token_hex(16)
            line = f"{name}={value}"
        lines.append(line)
    return "\n".join(lines) + "\n"


class Project:
    """One compose project, run from its directory like ``cd DIR && docker compose ...``."""

    def __init__(self, compose: Compose, directory: Path, name: str) -> None:
        self.compose, self.directory, self.name = compose, directory, name
        self.file = "compose.yaml"
        if compose.v1:
            document = yaml.safe_load((directory / "compose.yaml").read_text())
            del document["name"]  # v1: "'name' does not match any of the regexes: '^x-'"
            (directory / "compose.v1.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
            self.file = "compose.v1.yaml"

    def run(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [*self.compose.command, "-f", self.file, "-p", self.name, *args],
            cwd=self.directory,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"{' '.join(self.compose.command)} {' '.join(args)} failed ({result.returncode}):\n"
                f"{result.stderr}\n{result.stdout}\n{self.logs()}"
            )
        return result

    def logs(self) -> str:
        with_logs = self.run("logs", "--no-color", "--tail", "30", check=False, timeout=60)
        return f"--- compose logs ---\n{with_logs.stdout}{with_logs.stderr}"


def _remove_project(engine: Any, name: str) -> None:
    """What ``down -v`` should have removed, if it did not."""
    label = f"com.docker.compose.project={name}"
    for container in engine.client.containers.list(all=True, filters={"label": label}):
        container.remove(force=True)
    for network in engine.client.networks.list(filters={"label": label}):
        network.remove()


@dataclass(frozen=True)
class Deployed:
    project: Project
    url: str
    api_key: str
    services: dict[str, Any]  # compose.yaml's services


@pytest.fixture
def deployed(
    request: pytest.FixtureRequest, engine: Any, compose_command: Compose, cli: Cli, tmp_path: Path
) -> Iterator[Deployed]:
    """The example ``request.param`` built, exported, and up as a compose project of its own."""
    example = request.param
    chain = f"dk-compose-{example}"
    source = str(ROOT / "examples" / example / "chain.py")
    remove_chain(engine, chain)
    # 1. The images, built and tagged by the docker target (which then stops again).
    cli.push(source, "--name", chain, "--timeout", "120")
    cli.run("stop", chain)
    # 2. The export, publishing on a free port rather than 8000.
    port = unique_port()
    out = tmp_path / "compose"
    export = ["push", source, "--name", chain, "--target", "compose", "--dry-run", "--out", str(out)]
    cli.run(*export, "--port", str(port))
    services: dict[str, Any] = yaml.safe_load((out / "compose.yaml").read_text())["services"]
    for service in services.values():
        assert engine.image_id(service["image"]), f"the docker target did not tag {service['image']}"
    project = Project(compose_command, out, f"{chain}-{uuid.uuid4().hex[:8]}")
    try:
        # No .env yet: up stops before creating anything, naming the credential.
        refused = project.run("up", "-d", "--no-build", check=False)
        assert refused.returncode != 0, refused.stdout
        assert "CHAINS_INTERNAL_TOKEN" in refused.stderr
        assert not engine.client.containers.list(
            all=True, filters={"label": f"com.docker.compose.project={project.name}"}
        )
        api_key = secrets.token_hex(16)
        (out / ".env").write_text(
            _filled_env((out / ".env.example").read_text(), {"CHAINS_API_KEY": api_key})
        )
        # 3. Up, with the images as built.
        project.run("up", "-d", "--no-build", timeout=UP_TIMEOUT_SEC)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + READY_TIMEOUT_SEC
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{url}/readyz did not answer 200 in {READY_TIMEOUT_SEC:.0f}s\n{project.logs()}"
                )
            time.sleep(0.2)
        yield Deployed(project, url, api_key, services)
    finally:
        try:
            project.run("down", "-v", "--timeout", "10", timeout=120, check=False)
        finally:
            _remove_project(engine, project.name)


def _containers(engine: Any, project: Project) -> dict[str, Any]:
    """The project's containers by service name."""
    found = engine.client.containers.list(
        all=True, filters={"label": f"com.docker.compose.project={project.name}"}
    )
    return {c.labels["com.docker.compose.service"]: c for c in found}


@pytest.mark.parametrize("deployed", ["hello"], indirect=True)
def test_hello_answers_through_its_greeter_container(engine: Any, deployed: Deployed) -> None:
    names = {"names": ["Ada", "Grace"]}
    refused = httpx.post(f"{deployed.url}/run_remote", json=names, timeout=CALL_TIMEOUT_SEC)
    assert refused.status_code == 401, "CHAINS_API_KEY from .env is required"
    answer = httpx.post(
        f"{deployed.url}/run_remote",
        json=names,
        headers={"Authorization": f"Bearer {deployed.api_key}"},
        timeout=CALL_TIMEOUT_SEC,
    )
    assert answer.status_code == 200, answer.text
    # Greeted by Greeter: Hello's stub reaches it only by its service name, on the project's network.
    assert answer.json() == ["Hello, Ada!", "Hello, Grace!"]
    # Async calls too, their jobs kept in SQLite on the project's volume.
    auth = {"Authorization": f"Bearer {deployed.api_key}"}
    submitted = httpx.post(
        f"{deployed.url}/async_run_remote",
        json={"model_input": names},
        headers=auth,
        timeout=CALL_TIMEOUT_SEC,
    )
    assert submitted.status_code == 200, submitted.text
    job = submitted.json()["request_id"]
    deadline = time.monotonic() + 60
    while (status := httpx.get(f"{deployed.url}/async_request/{job}", headers=auth).json())[
        "status"
    ] != "SUCCEEDED":
        assert time.monotonic() < deadline and status["status"] in ("QUEUED", "IN_PROGRESS"), status
        time.sleep(0.2)
    output = httpx.get(f"{deployed.url}/async_request/{job}/output", headers=auth)
    assert output.json() == ["Hello, Ada!", "Hello, Grace!"]
    assert engine.client.volumes.get(f"{deployed.project.name}_jobs")
    # Every service runs; only the entrypoint is published, on 127.0.0.1.
    containers = _containers(engine, deployed.project)
    assert sorted(containers) == sorted(deployed.services)
    for service, container in containers.items():
        container.reload()
        assert container.status == "running", service
        bindings = [
            b for bs in (container.attrs["NetworkSettings"]["Ports"] or {}).values() for b in bs or []
        ]
        if "ports" in deployed.services[service]:
            assert [(b["HostIp"], b["HostPort"]) for b in bindings] == [
                ("127.0.0.1", deployed.url.rsplit(":", 1)[1])
            ]
        else:
            assert bindings == []


@pytest.mark.parametrize("deployed", ["streaming"], indirect=True)
def test_streaming_streams_through_its_producer_containers(deployed: Deployed) -> None:
    with httpx.stream(
        "POST",
        f"{deployed.url}/run_remote",
        json={"prompt": "to be", "max_tokens": 4},
        headers={"Authorization": f"Bearer {deployed.api_key}"},
        timeout=CALL_TIMEOUT_SEC,
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain")
        chunks = [chunk for chunk in response.iter_text() if chunk]
    # Generator's header, items and footer and Words' items, re-streamed as text by Entry.
    assert "".join(chunks) == "[4 tokens for 'to be'] to be to be\n[usage: 4 tokens; {\"tokens\":4}]"
    assert len(chunks) > 1, "the answer came as it was produced, not in one piece"
