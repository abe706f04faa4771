"""``chains push --target docker`` on a real engine: the streaming example, and a chain of three
chainlets with a replica set, through the command line and the Python API."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

import chains
from chains.streaming.sse import SSE
from chains.targets.docker_engine import started_at
from tests.docker.conftest import ROOT, Cli, dangling_images, remove_chain
from tests.helpers import dashboard, origin_of, write_chain

pytestmark = pytest.mark.docker

STREAMING = ROOT / "examples" / "streaming" / "chain.py"
SSE_ACCEPT = {"accept": "text/event-stream"}

THREE = '''
    """Entry -> Mid (two replicas) -> Leaf, each reporting the host that served it."""

    import socket
    from collections.abc import AsyncIterator

    import pydantic

    import chains


    class Echo(pydantic.BaseModel):
        host: str
        text: str
        secret_ok: bool = False


    class Leaf(chains.ChainletBase):
        remote_config = chains.RemoteConfig(assets=chains.Assets(secret_keys=["leaf_key"]))

        def __init__(self, context: chains.DeploymentContext = chains.depends_context()) -> None:
            self._key = context.secrets["leaf_key"]

        async def run_remote(self, text: str) -> AsyncIterator[Echo]:
            print(f"leaf splits {text!r}", flush=True)
            for word in text.split():
                yield Echo(host=socket.gethostname(), text=word, secret_ok=self._key == "s3cret")


    class Mid(chains.ChainletBase):
        remote_config = chains.RemoteConfig(
            compute=chains.Compute(replicas=2, cpu_count=0.5, memory="300Mi")
        )

        def __init__(self, leaf: Leaf = chains.depends(Leaf)) -> None:
            self._leaf = leaf

        async def run_remote(self, text: str) -> list[Echo]:
            words = [echo async for echo in self._leaf.run_remote(text)]
            return [Echo(host=socket.gethostname(), text=str(len(words))), *words]


    @chains.mark_entrypoint("dk-three")
    class Entry(chains.ChainletBase):
        def __init__(self, mid: Mid = chains.depends(Mid)) -> None:
            self._mid = mid

        async def run_remote(self, text: str, calls: int = 1) -> AsyncIterator[Echo]:
            for _ in range(calls):
                for echo in await self._mid.run_remote(text):
                    yield echo
            yield Echo(host=socket.gethostname(), text="done")
'''


# -- the streaming example, through the Python API ----------------------------------------------


def test_streaming_example_every_stream_form(
    engine: Any, tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHAINS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CHAINS_CACHE_DIR", str(cache_dir))
    monkeypatch.setenv("CHAINS_BASE_IMAGE", Cli(tmp_path, cache_dir).env["CHAINS_BASE_IMAGE"])
    remove_chain(engine, "dk-streaming")
    with chains.push(STREAMING, target="docker", name="dk-streaming", timeout=120) as chain:
        assert chain.target == "docker"
        assert chain.entrypoint_url.startswith("http://127.0.0.1:")
        # Framed (the stubs' form), on the host: the entrypoint's str stream.
        text = "".join(chain.call(prompt="to be", max_tokens=4))
        # Between containers: Generator's structured stream (header, items, footer) and Words'
        # typed items, both framed on the chain's network.
        assert text == "[4 tokens for 'to be'] to be to be\n[usage: 4 tokens; {\"tokens\":4}]"

        raw = httpx.post(f"{chain.entrypoint_url}/run_remote", json={"prompt": "to be", "max_tokens": 4})
        assert raw.status_code == 200 and raw.headers["content-type"].startswith("text/plain")
        assert raw.text == text

        sse = httpx.post(
            f"{chain.entrypoint_url}/run_remote",
            json={"prompt": "to be", "max_tokens": 4},
            headers={"accept": "text/event-stream"},
        )
        assert sse.headers["content-type"].startswith("text/event-stream")

        async def events() -> list[SSE]:
            async def chunks() -> Any:
                yield sse.content

            return [event async for event in SSE.from_chunks(chunks())]

        parsed = asyncio.run(events())
        assert "".join(e.data for e in parsed if e.event is None) == text
        assert parsed[-1].event == "end"

        names = {c.name for c in engine.containers({"chains.chain": "dk-streaming"})}
        assert names == {"dk-streaming-Entry", "dk-streaming-Generator", "dk-streaming-Words"}
    assert engine.containers({"chains.chain": "dk-streaming"}) == []


# -- three chainlets, a replica set, through the command line ------------------------------------


@pytest.fixture(scope="module")
def three(engine: Any, tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Iterator[dict[str, Any]]:
    """The chain pushed once for the tests below, which run in order: the last ones re-push
    and stop it."""
    remove_chain(engine, "dk-three")
    folder = tmp_path_factory.mktemp("three")
    file = write_chain(folder / "chain", THREE)
    cli = Cli(folder / "home", cache_dir)
    dangling = dangling_images(engine)
    pushed, progress = cli.push_reporting(str(file), "--secret", "leaf_key=s3cret", "--timeout", "120")
    info = {"cli": cli, "file": file, "pushed": pushed, "progress": progress, "dangling": dangling}
    yield info
    cli.run("stop", "dk-three", check=False)
    remove_chain(engine, "dk-three")


def _containers(engine: Any) -> dict[str, Any]:
    return {c.name: c for c in engine.containers({"chains.chain": "dk-three"})}


def test_three_chainlets_are_running(engine: Any, three: dict[str, Any]) -> None:
    pushed = three["pushed"]
    assert pushed["name"] == "dk-three" and pushed["target"] == "docker"
    assert set(pushed["chainlets"]) == {"Entry", "Mid", "Leaf"}
    assert pushed["chainlets"]["Mid"] == ["http://dk-three-Mid-0:8000", "http://dk-three-Mid-1:8000"]
    assert set(_containers(engine)) == {"dk-three-Entry", "dk-three-Mid-0", "dk-three-Mid-1", "dk-three-Leaf"}
    status = three["cli"].run("status", "dk-three").stdout
    assert status.count("ready") == 4 and "Mid[1]" in status, status


def test_dependencies_are_reached_by_container_name(engine: Any, three: dict[str, Any]) -> None:
    url = three["pushed"]["entrypoint_url"]
    lines = httpx.post(f"{url}/run_remote", json={"text": "a b", "calls": 2}, timeout=30).text.splitlines()
    echoes = [json.loads(line) for line in lines]  # typed items, raw: NDJSON
    hosts = [e["host"] for e in echoes]
    # Two calls went to Mid, one to each replica in turn; each called Leaf, which saw the secret.
    assert {hosts[0], hosts[3]} == {"dk-three-Mid-0", "dk-three-Mid-1"}
    assert [e["text"] for e in echoes] == ["2", "a", "b", "2", "a", "b", "done"]
    assert all(e["secret_ok"] for e in echoes if e["host"] == "dk-three-Leaf")
    assert hosts.count("dk-three-Leaf") == 4 and hosts[-1] == "dk-three-Entry"
    env = dict(v.split("=", 1) for v in _containers(engine)["dk-three-Entry"].attrs["Config"]["Env"])
    assert json.loads(env["CHAINS_DEPENDENCY_URLS"]) == {
        "Mid": ["http://dk-three-Mid-0:8000", "http://dk-three-Mid-1:8000"]
    }


def test_only_the_entrypoint_is_published_on_loopback(engine: Any, three: dict[str, Any]) -> None:
    port = int(three["pushed"]["entrypoint_url"].rsplit(":", 1)[1])
    for name, container in _containers(engine).items():
        bindings = {k: v for k, v in (container.attrs["NetworkSettings"]["Ports"] or {}).items() if v}
        if name == "dk-three-Entry":
            assert bindings == {"8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(port)}]}
        else:
            assert bindings == {}, name
        networks = set(container.attrs["NetworkSettings"]["Networks"])
        assert len(networks) == 1 and next(iter(networks)).startswith("chains-dk-three-")


def test_limits_user_health_and_no_secret_in_images(engine: Any, three: dict[str, Any]) -> None:
    containers = _containers(engine)
    mid = containers["dk-three-Mid-0"].attrs["HostConfig"]
    assert mid["NanoCpus"] == 500_000_000 and mid["Memory"] == 300 * 2**20
    leaf = containers["dk-three-Leaf"]
    assert leaf.attrs["State"]["Health"]["Status"] == "healthy"
    image = engine.client.images.get(leaf.attrs["Config"]["Image"])
    assert image.attrs["Config"]["User"] == "chains"
    assert "/readyz" in " ".join(image.attrs["Config"]["Healthcheck"]["Test"])
    assert not any("s3cret" in value for value in image.attrs["Config"].get("Env") or [])
    assert "CHAINS_SECRET_leaf_key=s3cret" in leaf.attrs["Config"]["Env"]  # set when it started


def test_call_and_logs(engine: Any, three: dict[str, Any]) -> None:
    cli: Cli = three["cli"]
    follow = subprocess.Popen(
        [sys.executable, "-m", "chains", "logs", "dk-three", "Leaf", "-f"],
        env=cli.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        out = cli.run("call", "dk-three", "--json", '{"text": "followed words"}').stdout
        assert '"followed"' in out and '"done"' in out
        deadline = time.monotonic() + 30
        seen = []
        assert follow.stdout is not None
        while time.monotonic() < deadline:
            line = follow.stdout.readline()
            seen.append(line)
            if "leaf splits 'followed words'" in line:
                break
        else:
            raise AssertionError(f"logs -f did not show the call: {seen}")
    finally:
        follow.terminate()
        follow.wait(10)
    logs = cli.run("logs", "dk-three").stdout
    assert "Mid-0 | " in logs and "Mid-1 | " in logs and "chainlet Leaf is ready" in logs


def test_the_dashboard_shows_a_docker_chain(engine: Any, three: dict[str, Any]) -> None:
    cli: Cli = three["cli"]
    cli.run("call", "dk-three", "--json", '{"text": "seen on the page"}')
    with dashboard("dk-three", cli.env) as url:
        origin = origin_of(url)
        overview = httpx.get(f"{origin}/api/overview", timeout=30).json()
        drawn = {node["name"]: node["replicas"] for node in overview["chainlets"]}
        assert drawn == {"Entry": 1, "Mid": 2, "Leaf": 1}  # from the descriptors built with the images
        assert overview["target"] == "docker" and overview["entrypoint"] == "Entry"
        arguments = {"text": "from the page"}
        called = httpx.post(f"{origin}/api/call", json=arguments, headers=SSE_ACCEPT, timeout=60)
        assert called.status_code == 200 and '"page"' in called.text, called.text
        leaf = httpx.get(f"{origin}/api/logs", params={"chainlet": "Leaf", "lines": "50"}, timeout=30)
        assert leaf.status_code == 200, leaf.text
        assert any("leaf splits 'seen on the page'" in text for text in leaf.json()["lines"])
        mid = httpx.get(f"{origin}/api/logs", params={"chainlet": "Mid"}, timeout=30).json()["lines"]
        assert {line.split(" | ")[0] for line in mid} == {"Mid-0", "Mid-1"}  # both containers


def test_unchanged_repush_builds_nothing_and_keeps_the_url(engine: Any, three: dict[str, Any]) -> None:
    cli: Cli = three["cli"]
    before = {c.name: c.id for c in _containers(engine).values()}
    pushed, progress = cli.push_reporting(str(three["file"]), "--secret", "leaf_key=s3cret")
    assert "building" not in progress and progress.count("is up to date") == 3, progress
    assert pushed["entrypoint_url"] == three["pushed"]["entrypoint_url"]
    after = {c.name: c.id for c in _containers(engine).values()}
    assert set(after) == set(before)  # the new containers took the plain names
    assert not set(after.values()) & set(before.values())  # and they are new
    networks = engine.client.networks.list(filters={"label": "chains.chain=dk-three"})
    assert len(networks) == 1
    out = httpx.post(f"{pushed['entrypoint_url']}/run_remote", json={"text": "again"}, timeout=30)
    assert out.status_code == 200 and '"again"' in out.text


def _job_status(http: httpx.Client, job_id: str) -> dict[str, Any]:
    answer = http.get(f"/async_request/{job_id}")
    assert answer.status_code == 200, answer.text
    status: dict[str, Any] = answer.json()
    return status


def _when(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def test_async_calls_outlive_a_repush(engine: Any, three: dict[str, Any]) -> None:
    """The entrypoint's jobs live in the chain's volume: a result stored before a re-push is
    fetched after it, and jobs still queued when the old entrypoint stopped run on the new one."""
    cli: Cli = three["cli"]
    with httpx.Client(base_url=three["pushed"]["entrypoint_url"], timeout=30) as http:

        def submit(text: str, calls: int) -> str:
            answer = http.post("/async_run_remote", json={"model_input": {"text": text, "calls": calls}})
            assert answer.status_code == 200, answer.text
            return str(answer.json()["request_id"])

        done = submit("kept across pushes", 1)
        deadline = time.monotonic() + 60
        while _job_status(http, done)["status"] != "SUCCEEDED":
            assert time.monotonic() < deadline, _job_status(http, done)
            time.sleep(0.2)
        # More work than the two job workers finish while the push builds and hands over.
        backlog = [submit("a b c d", 150) for _ in range(30)]
        pushed_at = time.time()
        cli.push_reporting(str(three["file"]), "--secret", "leaf_key=s3cret")
        entry = next(c for c in engine.containers({"chains.chain": "dk-three"}) if c.name == "dk-three-Entry")
        new_start = started_at(entry.attrs)
        assert new_start is not None and new_start > pushed_at
        deadline = time.monotonic() + 300
        statuses = [_job_status(http, job) for job in backlog]
        while any(s["status"] in ("QUEUED", "IN_PROGRESS") for s in statuses):
            assert time.monotonic() < deadline, statuses
            time.sleep(0.5)
            statuses = [_job_status(http, job) for job in backlog]
        assert {s["status"] for s in statuses} == {"SUCCEEDED"}, statuses
        after = [s for s in statuses if _when(s["status_at"]) > new_start]
        assert after, "every job had finished before the re-push: raise the backlog"
        assert all(_when(s["created_at"]) < pushed_at for s in after)
        events = http.get(f"/async_request/{done}/events")
        assert events.status_code == 200 and "kept" in events.text, events.text
    volume = engine.client.volumes.get("chains-dk-three-jobs")
    assert volume.attrs["Labels"] == {"chains.chain": "dk-three"}


def test_stop_leaves_no_container_network_or_dangling_image(engine: Any, three: dict[str, Any]) -> None:
    cli: Cli = three["cli"]
    assert "stopped chain 'dk-three'" in cli.run("stop", "dk-three").stdout
    assert engine.containers({"chains.chain": "dk-three"}) == []
    assert engine.client.networks.list(filters={"label": "chains.chain=dk-three"}) == []
    assert dangling_images(engine) <= three["dangling"]
    assert "dk-three" not in cli.run("status").stdout
    # The images stay, as the cache of the next push.
    assert engine.client.images.list(filters={"label": "chains.chain=dk-three"})
    # And the jobs volume, as local keeps jobs.sqlite: `docker volume rm` forgets the jobs.
    assert engine.client.volumes.get("chains-dk-three-jobs")


WATCHED = """
    import chains


    class Leaf(chains.ChainletBase):
        async def run_remote(self, text: str) -> str:
            return text.upper()


    @chains.mark_entrypoint("dk-watch")
    class Entry(chains.ChainletBase):
        def __init__(self, leaf: Leaf = chains.depends(Leaf)) -> None:
            self._leaf = leaf

        async def run_remote(self, text: str) -> str:
            return await self._leaf.run_remote(text)
"""


def test_watch_pushes_a_changed_chainlet_again(engine: Any, cli: Cli, tmp_path: Path) -> None:
    remove_chain(engine, "dk-watch")
    file = write_chain(tmp_path / "watched", WATCHED)
    command = [sys.executable, "-m", "chains", "push", str(file), "--target", "docker", "--watch"]
    with open(tmp_path / "watch.err", "w") as progress:  # a file: a full pipe would block the push
        watcher = subprocess.Popen(command, env=cli.env, stdout=subprocess.PIPE, stderr=progress, text=True)
    assert watcher.stdout is not None

    def wait_for(text: str, timeout: float) -> list[str]:
        deadline, seen = time.monotonic() + timeout, []
        while time.monotonic() < deadline:
            line = watcher.stdout.readline()  # type: ignore[union-attr]
            if not line and watcher.poll() is not None:
                break
            seen.append(line)
            if text in line:
                return seen
        raise AssertionError(f"no {text!r} within {timeout}s: {''.join(seen)}")

    try:
        lines = wait_for("watching", 300)
        url = next(line.split()[1] for line in lines if line.startswith("entrypoint: "))
        assert httpx.post(f"{url}/run_remote", json={"text": "Mixed"}, timeout=10).json() == "MIXED"
        file.write_text(file.read_text().replace("text.upper()", "text.lower()"))
        changed = wait_for("[watch] change seen", 300)[-1]
        assert "rebuilt Leaf and pushed the chain again" in changed, changed
        assert httpx.post(f"{url}/run_remote", json={"text": "Mixed"}, timeout=10).json() == "mixed"
        assert cli.state("dk-watch")["entrypoint_url"] == url
    finally:
        watcher.send_signal(signal.SIGINT)  # Ctrl-C: the watch stops the chain
        try:
            watcher.wait(60)
        except subprocess.TimeoutExpired:
            watcher.kill()
            watcher.wait(10)
    assert engine.containers({"chains.chain": "dk-watch"}) == []


# -- apt requirements ---------------------------------------------------------------------------

APT = """
    import shutil
    import subprocess

    import chains


    @chains.mark_entrypoint("dk-apt")
    class Tool(chains.ChainletBase):
        remote_config = chains.RemoteConfig(docker_image=chains.DockerImage(apt_requirements=["jq"]))

        async def run_remote(self, document: str) -> str:
            assert shutil.which("jq"), "jq is not installed in the image"
            done = subprocess.run(["jq", "-c", ".b"], input=document, capture_output=True, text=True)
            return done.stdout.strip()
"""


def test_apt_requirements_are_installed_in_the_image(engine: Any, cli: Cli, tmp_path: Path) -> None:
    # The engine here has no default bridge; build steps that need the network (apt-get)
    # reach Debian's mirror through the host's, as CHAINS_BUILD_NETWORK lets a user choose.
    cli.env["CHAINS_BUILD_NETWORK"] = "host"
    file = write_chain(tmp_path / "apt", APT)
    try:
        pushed = cli.push(str(file))
        answer = httpx.post(
            f"{pushed['entrypoint_url']}/run_remote", json={"document": '{"b": [1, 2]}'}, timeout=30
        )
        assert answer.status_code == 200 and answer.json() == "[1,2]"
    finally:
        cli.run("stop", "dk-apt", check=False)
        remove_chain(engine, "dk-apt")


# -- GPUs -----------------------------------------------------------------------------------------

GPU = """
    import chains


    @chains.mark_entrypoint("dk-gpu")
    class Infer(chains.ChainletBase):
        remote_config = chains.RemoteConfig(compute=chains.Compute(gpu="T4"))

        async def run_remote(self, text: str) -> str:
            return text
"""


def test_a_gpu_chainlet_asks_the_engine_for_a_gpu_and_says_why_it_got_none(
    engine: Any, cli: Cli, tmp_path: Path
) -> None:
    # This engine has no NVIDIA runtime (nor a GPU): the container's device request is refused
    # when it starts, and the push says so in terms of the chainlet's Compute.
    file = write_chain(tmp_path / "gpu", GPU)
    try:
        result = cli.run("push", str(file), "--target", "docker", check=False)
        assert result.returncode != 0
        assert "chainlet Infer asks for a GPU (Compute(gpu='T4'))" in result.stderr, result.stderr
        assert "install the NVIDIA Container Toolkit" in result.stderr
        # The engine's own refusal, which only a request for GPU devices gets.
        assert 'could not select device driver "" with capabilities: [[gpu]]' in result.stderr
        assert not engine.containers({"chains.chain": "dk-gpu"}), "a failed push leaves no container"
    finally:
        cli.run("stop", "dk-gpu", check=False)
        remove_chain(engine, "dk-gpu")
