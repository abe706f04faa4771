"""``chains push --target swarm`` on a real two-node swarm: the streaming example and a chain of
three chainlets whose middle one has a replica on each node, compared with the local target."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from chains.sse import SSE
from tests.helpers import write_chain
from tests.swarm.conftest import ROOT, Cli, Swarm, remove_stack, service_tasks

STREAMING = ROOT / "examples" / "streaming" / "chain.py"

THREE = '''
    """Entry -> Mid (two replicas) -> Leaf; Leaf fails on "fail", and reads a secret."""

    from collections.abc import AsyncIterator

    import pydantic

    import chains


    class Echo(pydantic.BaseModel):
        text: str
        secret_ok: bool = False


    class Leaf(chains.ChainletBase):
        remote_config = chains.RemoteConfig(assets=chains.Assets(secret_keys=["leaf_key"]))

        def __init__(self, context: chains.DeploymentContext = chains.depends_context()) -> None:
            self._key = context.secrets["leaf_key"]

        async def run_remote(self, text: str) -> AsyncIterator[Echo]:
            if text == "fail":
                raise ValueError(f"leaf refuses {text!r}")
            print(f"leaf splits {text!r}", flush=True)
            for word in text.split():
                yield Echo(text=word, secret_ok=self._key == "s3cret")


    class Mid(chains.ChainletBase):
        remote_config = chains.RemoteConfig(
            compute=chains.Compute(replicas=2, cpu_count=0.5, memory="300Mi")
        )

        def __init__(self, leaf: Leaf = chains.depends(Leaf)) -> None:
            self._leaf = leaf

        async def run_remote(self, text: str) -> list[Echo]:
            words = [echo async for echo in self._leaf.run_remote(text)]
            return [Echo(text=str(len(words))), *words]


    @chains.mark_entrypoint("sw-three")
    class Entry(chains.ChainletBase):
        def __init__(self, mid: Mid = chains.depends(Mid)) -> None:
            self._mid = mid

        async def run_remote(self, text: str, calls: int = 1) -> AsyncIterator[Echo]:
            for _ in range(calls):
                for echo in await self._mid.run_remote(text):
                    yield echo
            yield Echo(text="done")
'''

CALLS: list[tuple[str, dict[str, Any], dict[str, str]]] = [
    ("ndjson", {"text": "a b c", "calls": 2}, {}),
    ("sse", {"text": "x y", "calls": 1}, {"accept": "text/event-stream"}),
]


def _outputs(url: str) -> dict[str, Any]:
    """Every form of the chain's answers: raw typed items, SSE, and the remote error."""
    found: dict[str, Any] = {}
    for name, body, headers in CALLS:
        answer = httpx.post(f"{url}/run_remote", json=body, headers=headers, timeout=60)
        found[name] = (answer.status_code, answer.headers["content-type"], answer.text)
    error = httpx.post(f"{url}/run_remote", json={"text": "fail"}, timeout=60)
    found["error"] = (error.status_code, _error_shape(error.json()["error"]))
    return found


def _error_shape(error: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Each hop of a remote error: chainlet, type and message (tracebacks differ in paths)."""
    hops = []
    while error:
        hops.append((error["chainlet"], error["exc_type"], error["message"]))
        error = error.get("cause") or {}
    return hops


@pytest.fixture(scope="module")
def three(
    swarm: Swarm, tmp_path_factory: pytest.TempPathFactory, cache_dir: Path
) -> Iterator[dict[str, Any]]:
    """The chain pushed once, on the local target first (the reference) and then on the swarm;
    the tests below run in order: the last ones re-push and stop it."""
    remove_stack(swarm, "sw-three")
    folder = tmp_path_factory.mktemp("three")
    file = write_chain(folder / "chain", THREE)
    local = Cli(swarm, folder / "local-home", cache_dir, target="local")
    pushed_local = local.push(str(file), "--secret", "leaf_key=s3cret")
    try:
        reference = _outputs(pushed_local["entrypoint_url"])
    finally:
        local.run("stop", "sw-three")
    cli = Cli(swarm, folder / "home", cache_dir)
    pushed, progress = cli.push_reporting(str(file), "--secret", "leaf_key=s3cret", "--timeout", "180")
    yield {"cli": cli, "file": file, "pushed": pushed, "progress": progress, "reference": reference}
    cli.run("stop", "sw-three", check=False)
    remove_stack(swarm, "sw-three")


def test_the_middle_chainlets_replicas_run_on_both_nodes(swarm: Swarm, three: dict[str, Any]) -> None:
    nodes = swarm.node_ids()
    tasks = service_tasks(swarm, "sw-three_sw-three-mid")
    assert [t["State"] for t in tasks] == ["running", "running"], tasks
    assert {t["NodeID"] for t in tasks} == set(nodes)  # one on each node
    # Each node's engine runs a Mid container of its own, from the image the push loaded there.
    for host in nodes.values():
        names = swarm.docker(
            "ps",
            "--filter",
            "label=com.docker.swarm.service.name=sw-three_sw-three-mid",
            "--format",
            "{{.Names}}",
            host=host,
        ).split()
        assert len(names) == 1, (host, names)
    status = three["cli"].run("status", "sw-three").stdout
    assert status.count("ready") == 4 and "Mid[1]" in status, status


def test_calls_and_streams_match_the_local_target(three: dict[str, Any]) -> None:
    found = _outputs(three["pushed"]["entrypoint_url"])
    assert found == three["reference"]
    lines = [json.loads(line) for line in found["ndjson"][2].splitlines()]
    assert [e["text"] for e in lines] == ["3", "a", "b", "c", "3", "a", "b", "c", "done"]
    assert all(e["secret_ok"] for e in lines if e["text"] in "abc")  # Leaf read its swarm secret


def test_a_remote_error_carries_every_hops_traceback(three: dict[str, Any]) -> None:
    answer = httpx.post(f"{three['pushed']['entrypoint_url']}/run_remote", json={"text": "fail"}, timeout=60)
    assert answer.status_code == 500
    error = answer.json()["error"]
    hops = []
    while error:
        hops.append(error)
        error = error.get("cause") or {}
    assert [h["chainlet"] for h in hops] == ["Entry", "Mid", "Leaf"]
    assert "leaf refuses 'fail'" in hops[-1]["message"]
    for hop in hops:
        assert "Traceback" in hop["traceback"] or "run_remote" in hop["traceback"], hop


def test_credentials_are_swarm_secrets_never_in_the_stack(swarm: Swarm, three: dict[str, Any]) -> None:
    home: Path = three["cli"].home
    stack_files = list(home.glob("sw-three/deployments/*/stack.json"))
    assert len(stack_files) == 1
    text = stack_files[0].read_text()
    specs = swarm.docker("service", "inspect", *[f"sw-three_sw-three-{n}" for n in ("entry", "mid", "leaf")])
    token = swarm.docker(
        "exec", _container(swarm, "sw-three_sw-three-leaf"), "cat", "/run/secrets/CHAINS_INTERNAL_TOKEN"
    )
    assert len(token) >= 32
    for where in (text, specs):
        assert "s3cret" not in where and token not in where
        assert "CHAINS_INTERNAL_TOKEN" in where  # named, as the file each task reads
    document = json.loads(text)
    network = document["networks"]["chain"]
    assert network["driver"] == "overlay"
    for service in document["services"].values():
        assert service["deploy"]["endpoint_mode"] == "dnsrr"
        assert "healthcheck" in service
        assert service["deploy"]["update_config"]["order"] in ("start-first", "stop-first")


def _container(swarm: Swarm, service: str) -> str:
    """A running container of ``service`` on node 1 (the manager), by name."""
    for host in (swarm.node1, swarm.node2):
        names = swarm.docker(
            "ps",
            "--filter",
            f"label=com.docker.swarm.service.name={service}",
            "--format",
            "{{.Names}}",
            host=host,
        ).split()
        if names and host == swarm.node1:
            return names[0]
    raise AssertionError(f"no container of {service} on node 1")


def test_call_and_logs(three: dict[str, Any]) -> None:
    cli: Cli = three["cli"]
    out = cli.run("call", "sw-three", "--json", '{"text": "followed words"}').stdout
    assert '"followed"' in out and '"done"' in out
    deadline = time.monotonic() + 30
    logs = ""
    while time.monotonic() < deadline:  # service logs reach the manager within a moment
        logs = cli.run("logs", "sw-three", "Leaf").stdout
        if "leaf splits 'followed words'" in logs:
            break
        time.sleep(0.5)
    assert "leaf splits 'followed words'" in logs
    every = cli.run("logs", "sw-three").stdout
    assert "Mid | " in every and "Leaf | " in every


def test_repush_rolls_every_service_over_and_keeps_the_url(swarm: Swarm, three: dict[str, Any]) -> None:
    cli: Cli = three["cli"]
    file: Path = three["file"]
    before = {t["ID"] for t in service_tasks(swarm, "sw-three_sw-three-mid")}
    file.write_text(file.read_text().replace('Echo(text="done")', 'Echo(text="done again")'))
    pushed = cli.push(str(file), "--secret", "leaf_key=s3cret", "--timeout", "180")
    assert pushed["entrypoint_url"] == three["pushed"]["entrypoint_url"]
    after = service_tasks(swarm, "sw-three_sw-three-mid")
    assert not {t["ID"] for t in after} & before and len(after) == 2
    answer = httpx.post(f"{pushed['entrypoint_url']}/run_remote", json={"text": "again"}, timeout=60)
    assert answer.status_code == 200 and '"done again"' in answer.text


def test_stop_removes_services_network_and_secrets(swarm: Swarm, three: dict[str, Any]) -> None:
    cli: Cli = three["cli"]
    assert "stopped chain 'sw-three'" in cli.run("stop", "sw-three").stdout
    assert swarm.docker("service", "ls", "-q", "--filter", "label=com.docker.stack.namespace=sw-three") == ""
    assert swarm.docker("network", "ls", "-q", "--filter", "label=com.docker.stack.namespace=sw-three") == ""
    assert swarm.docker("secret", "ls", "-q", "--filter", "label=chains.chain=sw-three") == ""


# -- the streaming example -----------------------------------------------------------------------


def _stream_forms(url: str) -> dict[str, Any]:
    body = {"prompt": "to be", "max_tokens": 4}
    raw = httpx.post(f"{url}/run_remote", json=body, timeout=60)
    sse = httpx.post(f"{url}/run_remote", json=body, headers={"accept": "text/event-stream"}, timeout=60)

    async def events() -> list[SSE]:
        async def chunks() -> Any:
            yield sse.content

        return [event async for event in SSE.from_chunks(chunks())]

    parsed = asyncio.run(events())
    return {
        "raw": (raw.status_code, raw.headers["content-type"], raw.text),
        "sse": [(e.event, e.data) for e in parsed],
    }


def test_streaming_example_matches_the_local_target(swarm: Swarm, tmp_path: Path, cache_dir: Path) -> None:
    remove_stack(swarm, "sw-streaming")
    local = Cli(swarm, tmp_path / "local-home", cache_dir, target="local")
    url = local.push(str(STREAMING), "--name", "sw-streaming")["entrypoint_url"]
    try:
        reference = _stream_forms(url)
    finally:
        local.run("stop", "sw-streaming")
    cli = Cli(swarm, tmp_path / "home", cache_dir)
    try:
        pushed = cli.push(str(STREAMING), "--name", "sw-streaming", "--timeout", "180")
        found = _stream_forms(pushed["entrypoint_url"])
        assert found == reference
        assert found["raw"][2] == "[4 tokens for 'to be'] to be to be\n[usage: 4 tokens; {\"tokens\":4}]"
        framed = subprocess.run(
            [
                sys.executable,
                "-m",
                "chains",
                "call",
                "sw-streaming",
                "--json",
                '{"prompt": "to be", "max_tokens": 4}',
            ],
            capture_output=True,
            text=True,
            env=cli.env,
            timeout=60,
            check=True,
        ).stdout
        assert "to be to be" in framed
    finally:
        cli.run("stop", "sw-streaming", check=False)
        remove_stack(swarm, "sw-streaming")
