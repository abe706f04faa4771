"""The ray target's pieces that need no cluster: what ``Compute`` becomes in Serve's options,
the proxy's URL and authority, and the wrapper that serves a chainlet app under Serve's
route prefix."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

import chains
from chains.checks import chainlet_spec
from chains.errors import ChainsUsageError
from chains.server.serve import create_app
from chains.server.settings import ServerSettings
from chains.streaming.writer import WriterChunk
from chains.targets.certificates import ChainAuthority
from chains.targets.ray import PROXY_CA_ENV, _proxy_ca, _proxy_url, deployment_options, route_prefix
from tests import helpers
from tests.ray.conftest import SAMPLES, unavailable


@pytest.fixture(scope="module")
def ray_app() -> Any:
    try:
        from chains.targets import ray_app
    except ImportError:
        unavailable("Ray Serve is not installed; enable these tests with: pip install -e '.[dev,ray]'")
    return ray_app


class Echo(chains.ChainletBase):
    remote_config = chains.RemoteConfig(
        compute=chains.Compute(
            cpu_count=0.5, memory="1Gi", gpu="A10G", gpu_count=2, concurrency=8, replicas=3
        ),
        options=chains.ChainletOptions(env_variables={"CHAINS_GRACE_SEC": "12"}),
    )

    async def run_remote(self, text: str) -> str:
        return text.upper()


class Scaled(chains.ChainletBase):
    remote_config = chains.RemoteConfig(compute=chains.Compute(concurrency=16, autoscale=(2, 6, 4)))

    async def run_remote(self, text: str) -> str:
        return text


class Broken(chains.ChainletBase):
    def __init__(self) -> None:
        raise RuntimeError("no model file here")

    async def run_remote(self, text: str) -> str:
        return text


def test_compute_becomes_ray_actor_options_replicas_and_limits() -> None:
    options = deployment_options(chainlet_spec(Echo))
    assert options == {
        "name": "Echo",
        "ray_actor_options": {"num_cpus": 0.5, "memory": 2**30, "num_gpus": 2, "accelerator_type": "A10G"},
        "max_ongoing_requests": 8,
        "graceful_shutdown_timeout_s": 12.0,
        "logging_config": {"enable_access_log": False, "log_level": "WARNING"},
        "num_replicas": 3,
    }


def test_autoscale_becomes_serves_autoscaling_config() -> None:
    options = deployment_options(chainlet_spec(Scaled))
    assert "num_replicas" not in options
    assert options["autoscaling_config"] == {
        "min_replicas": 2,
        "initial_replicas": 2,
        "max_replicas": 6,
        "target_ongoing_requests": 4,
    }
    assert options["ray_actor_options"] == {"num_cpus": 1, "memory": 512 * 2**20}


def test_route_prefixes_quote_what_a_url_path_cannot_hold() -> None:
    assert route_prefix("demo", "Entry") == "/demo/Entry"
    assert route_prefix("my chain/2", "Entry") == "/my%20chain%2F2/Entry"


def test_the_proxy_is_called_over_https_when_serve_serves_tls() -> None:
    proxies = {"proxies": {"n1": {"node_ip": "10.0.0.5"}}}
    plain = {"http_options": {"host": "0.0.0.0", "port": 8000}, **proxies}
    assert _proxy_url(plain) == "http://10.0.0.5:8000"
    tls = {"http_options": {"host": "10.0.0.5", "port": 8443, "ssl_certfile": "/x/proxy.pem"}}
    assert _proxy_url(tls) == "https://10.0.0.5:8443"


def test_the_proxys_authority_travels_with_the_chains_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    generated = tmp_path / "generated"
    generated.mkdir()
    monkeypatch.delenv(PROXY_CA_ENV, raising=False)
    assert _proxy_ca(generated) is None
    assert not list(generated.iterdir())

    ca = tmp_path / "ca.pem"
    ca.write_bytes(ChainAuthority.create("ray cluster").cert_pem)
    monkeypatch.setenv(PROXY_CA_ENV, str(ca))
    relative = _proxy_ca(generated)
    assert relative is not None and not Path(relative).is_absolute()
    assert (generated / relative).read_bytes() == ca.read_bytes()

    monkeypatch.setenv(PROXY_CA_ENV, str(tmp_path / "missing.pem"))
    with pytest.raises(ChainsUsageError, match=f"{PROXY_CA_ENV}=.*missing.pem.* cannot be read"):
        _proxy_ca(generated)
    (tmp_path / "notes.txt").write_text("not a certificate")
    monkeypatch.setenv(PROXY_CA_ENV, str(tmp_path / "notes.txt"))
    with pytest.raises(ChainsUsageError, match="holds no PEM certificate"):
        _proxy_ca(generated)


async def _serve(
    app: Any, requests: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[tuple[int, bytes]]]:
    """Start ``app`` with the lifespan protocol, send ``requests`` (scopes with a JSON body),
    shut it down; the lifespan messages it sent, and each answer's status and body."""
    incoming: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    lifespan_sent: list[dict[str, Any]] = []
    started = asyncio.Event()

    async def lifespan_send(message: dict[str, Any]) -> None:
        lifespan_sent.append(message)
        if message["type"].startswith("lifespan.startup."):
            started.set()

    await incoming.put({"type": "lifespan.startup"})
    lifespan = asyncio.create_task(app({"type": "lifespan"}, incoming.get, lifespan_send))
    await asyncio.wait_for(started.wait(), 10)
    answers = []
    if lifespan_sent[-1]["type"] == "lifespan.startup.complete":
        for scope in requests:
            body = scope.pop("body")
            status = 0
            chunks: list[bytes] = []

            async def receive(body: bytes = body) -> dict[str, Any]:
                return {"type": "http.request", "body": body, "more_body": False}

            async def send(message: dict[str, Any], chunks: list[bytes] = chunks) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = message["status"]
                else:
                    # Serve pickles what a replica sends: nothing but plain bytes may travel.
                    assert type(message.get("body", b"")) is bytes
                    chunks.append(message.get("body", b""))

            await app(scope, receive, send)
            answers.append((status, b"".join(chunks)))
    await incoming.put({"type": "lifespan.shutdown"})
    await asyncio.wait_for(lifespan, 10)
    return lifespan_sent, answers


def _post(root: str, path: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "http",
        "method": "POST",
        "root_path": root,
        "path": root + path,
        "headers": [(b"content-type", b"application/json")],
        "query_string": b"",
        "body": json.dumps(args).encode(),
    }


def test_the_app_is_served_below_its_route_prefix_once_built(ray_app: Any) -> None:
    app = ray_app.MountedApp(create_app(Echo, settings=ServerSettings(is_entrypoint=True)))
    sent, answers = asyncio.run(
        _serve(
            app,
            [
                _post("/demo/Echo", "/run_remote", {"text": "hi"}),
                {**_post("/demo/Echo", "/healthz", {}), "method": "GET"},
            ],
        )
    )
    assert [m["type"] for m in sent] == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert answers[0] == (200, b'"HI"')
    assert answers[1] == (200, b'{"status":"alive"}')


def test_a_chainlet_whose_init_raises_fails_the_startup_with_its_error(ray_app: Any) -> None:
    app = ray_app.MountedApp(create_app(Broken, settings=ServerSettings(is_entrypoint=True)))
    sent, answers = asyncio.run(_serve(app, [_post("/demo/Broken", "/run_remote", {"text": "x"})]))
    assert sent[0]["type"] == "lifespan.startup.failed"
    assert sent[0]["message"] == "chainlet Broken: __init__ raised RuntimeError: no model file here"
    assert answers == []


def test_a_writer_chunk_goes_on_as_plain_bytes(ray_app: Any) -> None:
    chunk = WriterChunk(b"frame")
    chunk.writer = object()  # type: ignore[assignment]
    forwarded: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        forwarded.append(message)

    plain = ray_app._plain_bytes(send)
    asyncio.run(plain({"type": "http.response.body", "body": chunk, "more_body": True}))
    assert type(forwarded[0]["body"]) is bytes and forwarded[0]["body"] == b"frame"
    assert forwarded[0]["more_body"] is True


def test_ray_options_are_refused_where_they_do_not_apply(tmp_path: Path) -> None:
    cli = helpers.Cli(tmp_path / "home")
    relay = str(SAMPLES / "relay.py")
    secret = ("--secret", "relay_signature=x")
    misplaced = cli.run(
        "push", relay, *secret, "--target", "local", "--address", "127.0.0.2:6379", check=False
    )
    assert misplaced.returncode == 1
    assert "--address names a Ray cluster: it is for --target ray" in misplaced.stderr
    port = cli.run("push", relay, *secret, "--target", "ray", "--port", "8123", check=False)
    assert port.returncode == 1
    assert "--port does not apply to the ray target" in port.stderr
    assert not (tmp_path / "home" / "ray-relay" / "state.json").exists()
