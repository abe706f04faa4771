"""The ray target on a real two-node cluster: chains pushed, called, inspected and stopped
with the command line, their output compared with the local target's, in the same test."""

from __future__ import annotations

import asyncio
import json
import ssl
import threading
import urllib.request
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from chains.loader import load_chain
from chains.stubs import StubBase, StubOptions
from chains.targets.ray import replicas
from tests import helpers
from tests.ray.cluster import HEAD_IP, WORKER_IP, RayCluster
from tests.ray.conftest import ROOT, SAMPLES, Cli

pytestmark = pytest.mark.ray

STREAMING = ROOT / "examples" / "streaming" / "chain.py"
RELAY = SAMPLES / "relay.py"


def _record(home: Path, chain: str) -> dict[str, object]:
    deployment = json.loads((home / chain / "state.json").read_text())["deployment"]
    record: dict[str, object] = json.loads(
        (home / chain / "deployments" / deployment / "ray.json").read_text()
    )
    return record


def _routes(cluster: RayCluster) -> dict[str, str]:
    url = f"{cluster.proxy_url}/-/routes"
    with urllib.request.urlopen(url, timeout=10, context=cluster.ssl_context()) as response:
        routes: dict[str, str] = json.loads(response.read())
    return routes


def _token(home: Path, chain: str) -> str:
    deployment_id = json.loads((home / chain / "state.json").read_text())["deployment"]
    deployment = json.loads((home / chain / "deployments" / deployment_id / "deployment.json").read_text())
    return str(deployment["chainlets"][0]["env"]["CHAINS_INTERNAL_TOKEN"])


def _calls_during(
    action: Callable[[], object], url: str, verify: ssl.SSLContext | None
) -> tuple[int, list[str]]:
    """Call the streaming example's entrypoint over and over while ``action`` runs; how many
    calls were made, and what went wrong with any."""
    stop = threading.Event()
    failed: list[str] = []
    calls = 0

    def caller() -> None:
        nonlocal calls
        with httpx.Client(timeout=30, verify=verify or True) as client:
            while not stop.is_set():
                try:
                    answer = client.post(url + "/run_remote", json={"prompt": "still here", "max_tokens": 2})
                    if (
                        answer.status_code != 200
                        or "[2 tokens for 'still here'] still here" not in answer.text
                    ):
                        failed.append(f"{answer.status_code}: {answer.text[:200]}")
                except httpx.HTTPError as exc:
                    failed.append(f"{type(exc).__name__}: {exc}")
                calls += 1

    thread = threading.Thread(target=caller)
    thread.start()
    try:
        action()
    finally:
        stop.set()
        thread.join(60)
    return calls, failed


def _local(tmp_path: Path) -> helpers.Cli:
    return helpers.Cli(tmp_path / "local-home", target="local", timeout=120)


def _cli_call(cli: helpers.Cli, chain: str, arguments: dict[str, object], *extra: str) -> str:
    return cli.run("call", chain, "--json", json.dumps(arguments), "--timeout", "60", *extra).stdout


def _streams(
    file: Path,
    url: str,
    arguments: list[dict[str, object]],
    api_key: str | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> list[list[object]]:
    """Each call's stream, read item by item by a typed client of the chain's entrypoint."""
    endpoint = load_chain(file).entrypoint.endpoint
    client_cls = type("EntryClient", (StubBase,), {"endpoint": endpoint})

    async def run() -> list[list[object]]:
        client = client_cls(
            url,
            name=endpoint.chainlet,
            options=StubOptions(timeout_sec=60),
            token=api_key,
            ssl_context=ssl_context,
        )
        try:
            return [[item async for item in client.stream_remote(**args)] for args in arguments]
        finally:
            await client.aclose()

    return asyncio.run(run())


def test_the_streaming_example_streams_on_two_nodes_as_on_the_local_target(
    cli: Cli, ray_cluster: RayCluster, tmp_path: Path
) -> None:
    # Through Ray Client (the relay test below connects to the head's GCS address instead).
    pushed = cli.push(str(STREAMING), "--address", ray_cluster.client_address)
    assert pushed["target"] == "ray"
    assert _record(cli.home, "streaming")["address"] == ray_cluster.client_address
    assert pushed["entrypoint_url"] == f"{ray_cluster.proxy_url}/streaming/Entry"
    local = _local(tmp_path)
    local_url = local.push(str(STREAMING))["entrypoint_url"]
    arguments: list[dict[str, object]] = [
        {"prompt": "two nodes, one chain"},
        {"prompt": "tokens", "max_tokens": 20},
        {"prompt": ""},
    ]
    try:
        on_ray = _streams(
            STREAMING, pushed["entrypoint_url"], arguments, ssl_context=ray_cluster.ssl_context()
        )
        on_local = _streams(STREAMING, local_url, arguments)
        printed_locally = _cli_call(local, "streaming", arguments[0])
    finally:
        local.run("stop", "streaming")
    assert on_ray == on_local
    assert on_ray[1][0] == "[20 tokens for 'tokens']" and len(on_ray[1]) == 20 + 1 + 3
    assert _cli_call(cli, "streaming", arguments[0]) == printed_locally

    # A re-push without --address goes where the chain runs and keeps the chain's token (so
    # that, in Serve's rolling update, old and new replicas accept each other's calls); callers
    # are served throughout.
    token = _token(cli.home, "streaming")
    del cli.env["RAY_ADDRESS"]
    calls, failed = _calls_during(
        lambda: cli.push(str(STREAMING)), pushed["entrypoint_url"], ray_cluster.ssl_context()
    )
    assert _record(cli.home, "streaming")["address"] == ray_cluster.client_address
    assert _token(cli.home, "streaming") == token
    assert calls > 0 and failed == [], failed

    status = cli.run("status", "streaming").stdout
    assert "target ray" in status
    assert status.count(" ready ") == 3, status
    state = cli.state("streaming")
    assert {p["chainlet"] for p in state["processes"]} == {"Generator", "Words", "Entry"}
    assert all(p["pid"] for p in state["processes"])
    # The Entry's log, fetched from whichever node runs it, says it was built. Every call of the
    # callers above added an access line after that one: read the whole log, not its last 100.
    assert "chainlet Entry is ready" in cli.run("logs", "streaming", "Entry", "--lines", "100000").stdout

    assert "/streaming/Entry" in _routes(ray_cluster)
    cli.run("stop", "streaming")
    assert not any(prefix.startswith("/streaming/") for prefix in _routes(ray_cluster))
    assert "no chains are running" in cli.run("status").stdout


def test_a_chain_of_three_runs_its_middle_on_both_nodes_and_answers_as_locally(
    cli: Cli, ray_cluster: RayCluster, tmp_path: Path
) -> None:
    key = "sesame"
    pushed = cli.push(str(RELAY), "--api-key", key, "--secret", "relay_signature=signed on ray")
    record = _record(cli.home, "ray-relay")
    found = replicas(str(record["dashboard_url"]), dict(record["apps"]))  # type: ignore[call-overload]
    middle = [r for r in found if r.chainlet == "Middle"]
    assert len(middle) == 2 and all(r.state == "RUNNING" for r in middle)
    # Serve's state API: the two replicas run on different nodes, one on each.
    assert {r.node_ip for r in middle} == {HEAD_IP, WORKER_IP}
    assert len({r.node_id for r in middle}) == 2
    # What Compute asked for, as Serve runs it.
    with urllib.request.urlopen(f"{record['dashboard_url']}/api/serve/applications/", timeout=30) as response:
        details = json.loads(response.read())
    configs = {
        name: details["applications"][f"ray-relay.{name}"]["deployments"][name]["deployment_config"]
        for name in ("Front", "Middle", "Back")
    }
    assert configs["Middle"]["num_replicas"] == 2
    assert configs["Middle"]["ray_actor_options"]["num_cpus"] == 0.25
    assert configs["Middle"]["ray_actor_options"]["memory"] == 128 * 2**20
    assert configs["Back"]["max_ongoing_requests"] == 8
    autoscaling = configs["Back"]["autoscaling_config"]
    assert (autoscaling["min_replicas"], autoscaling["max_replicas"]) == (1, 2)
    assert autoscaling["target_ongoing_requests"] == 4

    local = _local(tmp_path)
    local_url = local.push(str(RELAY), "--api-key", key, "--secret", "relay_signature=signed on ray")[
        "entrypoint_url"
    ]
    arguments: list[dict[str, object]] = [{"text": "one two three"}, {"text": ""}, {"text": "a " * 50}]
    try:
        on_ray = _streams(
            RELAY, pushed["entrypoint_url"], arguments, api_key=key, ssl_context=ray_cluster.ssl_context()
        )
        on_local = _streams(RELAY, local_url, arguments, api_key=key)
        failed_locally = local.run(
            "call", "ray-relay", "--json", '{"text": "please fail"}', "--api-key", key, check=False
        )
    finally:
        local.run("stop", "ray-relay")
    assert on_ray == on_local
    assert on_ray[0] == ["[ONE]", "[TWO]", "[THREE]", " (3 words) -- signed on ray"]
    assert (
        _cli_call(cli, "ray-relay", arguments[0], "--api-key", key)
        == "[ONE][TWO][THREE] (3 words) -- signed on ray\n"
    )

    # A remote error two hops down reaches the caller with every hop's traceback, in order.
    failed = cli.run("call", "ray-relay", "--json", '{"text": "please fail"}', "--api-key", key, check=False)
    assert failed.returncode == 1 == failed_locally.returncode
    message = failed.stderr
    assert "ValueError: Back refuses to upper-case 'fail' (got 2 words)" in message
    hops = [message.index(f"--- in chainlet {name} ---") for name in ("Front", "Middle", "Back")]
    assert hops == sorted(hops), message
    assert 'in run_remote\n    raise ValueError(f"Back refuses' in message
    # The same hops as on the local target (the files' paths differ: the nodes' working directories).
    assert [line for line in message.splitlines() if line.startswith("--- in chainlet")] == [
        line for line in failed_locally.stderr.splitlines() if line.startswith("--- in chainlet")
    ]

    # The API key guards the entrypoint, the chain's token the internal chainlets behind the
    # same proxy (and the API key is not the token).
    proxy = ray_cluster.proxy_url
    deployment = json.loads(
        next((cli.home / "ray-relay" / "deployments").glob("*/deployment.json")).read_text()
    )
    token = deployment["chainlets"][0]["env"]["CHAINS_INTERNAL_TOKEN"]
    with httpx.Client(timeout=30, verify=ray_cluster.ssl_context() or True) as client:
        front = f"{proxy}/ray-relay/Front/run_remote"
        assert client.post(front, json={"text": "x"}).status_code == 401
        assert (
            client.post(front, json={"text": "x"}, headers={"authorization": "Bearer nope"}).status_code
            == 401
        )
        for chainlet, args in (("Middle", {"text": "x"}), ("Back", {"words": ["x"]})):
            url = f"{proxy}/ray-relay/{chainlet}/run_remote"
            assert client.post(url, json=args).status_code == 401
            assert client.post(url, json=args, headers={"authorization": f"Bearer {key}"}).status_code == 401
        answer = client.post(
            f"{proxy}/ray-relay/Back/run_remote",
            json={"words": ["x"]},
            headers={"authorization": f"Bearer {token}"},
        )
    assert answer.status_code == 200 and answer.json() == ["X"]
    assert token not in cli.run("status", "ray-relay", "--json").stdout
