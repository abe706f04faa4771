"""The ray target on a real two-node cluster: chains pushed, called, inspected and stopped
with the command line, their output compared with the local target's, in the same test."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import httpx
import pytest

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
    with urllib.request.urlopen(f"{cluster.proxy_url}/-/routes", timeout=10) as response:
        routes: dict[str, str] = json.loads(response.read())
    return routes


def _local(tmp_path: Path) -> helpers.Cli:
    return helpers.Cli(tmp_path / "local-home", target="local", timeout=120)


def _calls(cli: helpers.Cli, chain: str, arguments: list[dict[str, object]]) -> list[str]:
    return [
        cli.run("call", chain, "--json", json.dumps(args), "--timeout", "60").stdout for args in arguments
    ]


def test_the_streaming_example_streams_on_two_nodes_as_on_the_local_target(
    cli: Cli, ray_cluster: RayCluster, tmp_path: Path
) -> None:
    pushed = cli.push(str(STREAMING))
    assert pushed["target"] == "ray"
    assert pushed["entrypoint_url"] == f"{ray_cluster.proxy_url}/streaming/Entry"
    local = _local(tmp_path)
    local.push(str(STREAMING))
    try:
        arguments: list[dict[str, object]] = [
            {"prompt": "two nodes, one chain"},
            {"prompt": "tokens", "max_tokens": 20},
            {"prompt": ""},
        ]
        on_ray = _calls(cli, "streaming", arguments)
        on_local = _calls(local, "streaming", arguments)
    finally:
        local.run("stop", "streaming")
    assert on_ray == on_local
    assert "[20 tokens for 'tokens']" in on_ray[1]

    status = cli.run("status", "streaming").stdout
    assert "target ray" in status
    assert status.count(" ready ") == 3, status
    state = cli.state("streaming")
    assert {p["chainlet"] for p in state["processes"]} == {"Generator", "Words", "Entry"}
    assert all(p["pid"] for p in state["processes"])
    # The Entry's log, fetched from whichever node runs it, says it was built.
    assert "chainlet Entry is ready" in cli.run("logs", "streaming", "Entry").stdout

    assert "/streaming/Entry" in _routes(ray_cluster)
    cli.run("stop", "streaming")
    assert not any(prefix.startswith("/streaming/") for prefix in _routes(ray_cluster))
    assert "no chains are running" in cli.run("status").stdout


def test_a_chain_of_three_runs_its_middle_on_both_nodes_and_answers_as_locally(
    cli: Cli, ray_cluster: RayCluster, tmp_path: Path
) -> None:
    cli.push(str(RELAY))
    record = _record(cli.home, "ray-relay")
    found = replicas(str(record["dashboard_url"]), dict(record["apps"]))  # type: ignore[call-overload]
    middle = [r for r in found if r.chainlet == "Middle"]
    assert len(middle) == 2 and all(r.state == "RUNNING" for r in middle)
    # Serve's state API: the two replicas run on different nodes, one on each.
    assert {r.node_ip for r in middle} == {HEAD_IP, WORKER_IP}
    assert len({r.node_id for r in middle}) == 2

    local = _local(tmp_path)
    local.push(str(RELAY))
    try:
        arguments: list[dict[str, object]] = [{"text": "one two three"}, {"text": ""}, {"text": "a " * 50}]
        on_ray = _calls(cli, "ray-relay", arguments)
        on_local = _calls(local, "ray-relay", arguments)
        failed_locally = local.run("call", "ray-relay", "--json", '{"text": "please fail"}', check=False)
    finally:
        local.run("stop", "ray-relay")
    assert on_ray == on_local
    assert on_ray[0] == "[ONE][TWO][THREE] (3 words)\n"

    # A remote error two hops down reaches the caller with every hop's traceback, in order.
    failed = cli.run("call", "ray-relay", "--json", '{"text": "please fail"}', check=False)
    assert failed.returncode == 1 == failed_locally.returncode
    message = failed.stderr
    assert "ValueError: Back refuses to upper-case 'fail' (got 2 words)" in message
    hops = [message.index(f"--- in chainlet {name} ---") for name in ("Front", "Middle", "Back")]
    assert hops == sorted(hops), message
    assert 'in run_remote\n    raise ValueError(f"Back refuses' in message
    # The same hops and error as on the local target (the files' paths differ: the nodes'
    # working directories).
    for name in ("Front", "Middle", "Back"):
        assert f"--- in chainlet {name} ---" in failed_locally.stderr


def test_the_token_guards_internal_chainlets_and_the_api_key_the_entrypoint(
    cli: Cli, ray_cluster: RayCluster
) -> None:
    cli.run("push", str(RELAY), "--target", "ray", "--api-key", "sesame", "--json")
    proxy = ray_cluster.proxy_url
    body = {"text": "x"}
    with httpx.Client(timeout=30) as client:
        assert client.post(f"{proxy}/ray-relay/Front/run_remote", json=body).status_code == 401
        wrong = client.post(
            f"{proxy}/ray-relay/Front/run_remote", json=body, headers={"authorization": "Bearer nope"}
        )
        assert wrong.status_code == 401
        good = client.post(
            f"{proxy}/ray-relay/Front/run_remote", json=body, headers={"authorization": "Bearer sesame"}
        )
        assert good.status_code == 200 and "[X]" in good.text
        # The internal chainlets behind the same proxy: refused without the chain's token,
        # and the entrypoint's API key is not it.
        for chainlet in ("Middle", "Back"):
            args = {"text": "x"} if chainlet == "Middle" else {"words": ["x"]}
            url = f"{proxy}/ray-relay/{chainlet}/run_remote"
            assert client.post(url, json=args).status_code == 401
            assert client.post(url, json=args, headers={"authorization": "Bearer sesame"}).status_code == 401
    deployment = json.loads(
        next((cli.home / "ray-relay" / "deployments").glob("*/deployment.json")).read_text()
    )
    token = deployment["chainlets"][0]["env"]["CHAINS_INTERNAL_TOKEN"]
    with httpx.Client(timeout=30) as client:
        answer = client.post(
            f"{proxy}/ray-relay/Back/run_remote",
            json={"words": ["x"]},
            headers={"authorization": f"Bearer {token}"},
        )
    assert answer.status_code == 200 and answer.json() == ["X"]
    assert token not in cli.run("status", "ray-relay", "--json").stdout
