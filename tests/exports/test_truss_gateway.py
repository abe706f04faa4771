"""Truss models calling each other through a gateway like Baseten's: truss's own server, a real nginx.

Every chainlet of the streaming example is exported as a Truss, turned into its image's build
context by ``truss image build-context``, and served from that context by truss's own inference
server (what the image runs), as a process on 127.0.0.1 with the config's environment variables
set, as ``truss``'s own local runs set them. Baseten's gateway cannot run here; a real nginx
stands in for it, doing what the calls rely on: one host per model, its route
``/environments/production/predict`` mapped to the server's ``/v1/models/model:predict``, and
``Authorization: Api-Key <key>`` required, every other credential refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml

from chains import run_local
from chains.errors import ChainsUsageError
from chains.loader import load_chain
from tests.exports.conftest import CHAINS, export
from tests.exports.test_truss import isolated, loaded_model
from tests.exports.truss_env import server_python, truss_python
from tests.helpers import unique_port, wait_until, write_chain
from tests.nginx import Nginx, Site, nginx_binary

API_KEY = "bt-test-key.0f3a9c"

# A leaf that fails on demand and reports the request id and deadline it was called with.
FAILING = """
import chains
from chains.call_context import current_call


class Leaf(chains.ChainletBase):
    async def run_remote(self, text: str) -> str:
        if text == "fail":
            raise ValueError(f"leaf refuses {text!r}")
        call = current_call()
        assert call is not None
        return f"{call.request_id} {call.remaining()}"


@chains.mark_entrypoint("gateway")
class Top(chains.ChainletBase):
    def __init__(self, leaf: Leaf = chains.depends(Leaf, retries=0, timeout_sec=30)) -> None:
        self._leaf = leaf

    async def run_remote(self, text: str) -> str:
        return await self._leaf.run_remote(text)
"""
PREDICT = "/environments/production/predict"

# truss's main.py binds 0.0.0.0; this serves the same application (TrussServer's own) on loopback.
LAUNCH = """
import sys

import uvicorn
from truss_server import TrussServer

port = int(sys.argv[1])
app = TrussServer(port, "config.yaml").create_application()
uvicorn.run(app, host="127.0.0.1", port=port, http="h11", loop="uvloop", log_level="info")
"""


@dataclass
class Model:
    """One chainlet's Truss, served by truss's server, behind the stand-in gateway."""

    name: str
    app_dir: Path
    port: int
    gateway: Site
    process: subprocess.Popen[bytes] | None = None

    @property
    def predict_url(self) -> str:
        return self.gateway.url + PREDICT

    def logs(self) -> str:
        path = self.app_dir / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""


def _app_dir(context: Path, app_dir: Path) -> None:
    """Lay out the build context as its Dockerfile copies it into the image's /app."""
    shutil.copytree(context / "server", app_dir)
    for part in ("model", "data"):
        shutil.copytree(context / part, app_dir / part)
    shutil.copy(context / "config.yaml", app_dir / "config.yaml")
    (app_dir / "launch.py").write_text(LAUNCH)


def _gateway_site(name: str, port: int, log: Path) -> Site:
    return Site(
        name,
        f"http://127.0.0.1:{port}",
        [
            f'if ($http_authorization != "Api-Key {API_KEY}") {{ return 401 "invalid API key"; }}',
            f"rewrite ^{PREDICT}$ /v1/models/model:predict break;",
            "proxy_buffering off;",
            "proxy_read_timeout 60s;",
            f"access_log {log};",
        ],
    )


@contextlib.contextmanager
def served(source: Path, root: Path) -> Iterator[dict[str, Model]]:
    """Every chainlet of ``source`` as a Truss served by truss's server behind the gateway, the
    callers exported with their callees' predict URLs on the gateway."""
    chain = load_chain(source)
    names = [spec.name for spec in chain.chainlets]
    called = {dep.name for spec in chain.chainlets for dep in spec.dependencies}
    ports = {name: unique_port() for name in names}
    sites = {name: _gateway_site(f"model-{name}", ports[name], root / f"{name}.access.log") for name in names}
    model_urls = {name: sites[name].url + PREDICT for name in called}
    exported = export("truss", source, root / "export", model_urls=model_urls)

    truss = truss_python()
    contexts = {name: root / "contexts" / name for name in names}
    for name in names:
        build = subprocess.run(
            [
                str(truss.parent / "truss"),
                "image",
                "build-context",
                str(contexts[name]),
                str(exported.out / name),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert build.returncode == 0, build.stderr[-2000:]

    found = {name: Model(name, root / "apps" / name, ports[name], sites[name]) for name in names}
    nginx = Nginx(nginx_binary(), root / "nginx", list(sites.values()))
    try:
        for name, model in found.items():
            _start(model, contexts[name])
        nginx.start()
        for model in found.values():
            wait_until(lambda m=model: _loaded(m), 60, f"truss server of {model.name} loaded its model")
        yield found
    finally:
        nginx.stop()
        for model in found.values():
            _stop(model)


def _start(model: Model, context: Path) -> None:
    _app_dir(context, model.app_dir)
    config = yaml.safe_load((model.app_dir / "config.yaml").read_text())
    env = {
        **os.environ,
        **config["environment_variables"],
        "PYTHONPATH": str(context / "packages"),  # the image's /packages
        "TRUSS_SECRET_baseten_api_key": API_KEY,  # how truss hands a model its secrets
    }
    with open(model.app_dir / "server.log", "ab") as log:
        model.process = subprocess.Popen(
            [str(server_python(context)), "launch.py", str(model.port)],
            cwd=model.app_dir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def _stop(model: Model) -> None:
    if model.process is not None and model.process.poll() is None:
        model.process.terminate()
        try:
            model.process.wait(15)
        except subprocess.TimeoutExpired:
            model.process.kill()
            model.process.wait(5)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Model]]:
    with served(CHAINS["streaming"], tmp_path_factory.mktemp("truss-gateway")) as found:
        yield found


def _loaded(model: Model) -> bool:
    assert model.process is not None
    if model.process.poll() is not None:
        raise AssertionError(f"truss server of {model.name} exited:\n{model.logs()[-3000:]}")
    try:
        return httpx.get(f"http://127.0.0.1:{model.port}/v1/models/model", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def _expected(prompt: str, max_tokens: int) -> str:
    """What the chain streams, computed in this process by run_local."""
    chain = load_chain(CHAINS["streaming"])

    async def collect() -> str:
        with run_local():
            entry = chain.entrypoint.cls()
            return "".join([part async for part in entry.run_remote(prompt, max_tokens)])

    return asyncio.run(collect())


def test_the_chain_streams_through_the_gateway_hop_by_hop(models: dict[str, Model]) -> None:
    entry = models["Entry"]
    with httpx.stream(
        "POST",
        entry.predict_url,
        json={"prompt": "one two three", "max_tokens": 6},
        headers={"authorization": f"Api-Key {API_KEY}"},
        timeout=60,
    ) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/plain")
        text = "".join(response.iter_text())
    assert text == _expected("one two three", 6)
    # Entry's calls crossed the gateway to each model, with the API key (else nginx said 401).
    for name in ("Generator", "Words"):
        lines = (entry.app_dir.parents[1] / f"{name}.access.log").read_text().splitlines()
        assert any(f'"POST {PREDICT} HTTP/1.1" 200' in line for line in lines), (name, lines)


def test_the_gateway_refuses_a_caller_without_the_key(models: dict[str, Model]) -> None:
    answer = httpx.post(models["Entry"].predict_url, json={"prompt": "x"}, timeout=30)
    assert answer.status_code == 401


@pytest.fixture(scope="module")
def failing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Model]]:
    root = tmp_path_factory.mktemp("truss-gateway-failing")
    with served(write_chain(root / "src", FAILING), root) as found:
        yield found


def _predict(model: Model, body: dict[str, object], **headers: str) -> httpx.Response:
    headers = {"authorization": f"Api-Key {API_KEY}", **headers}
    return httpx.post(model.predict_url, json=body, headers=headers, timeout=60)


def test_an_error_crosses_the_gateway_with_its_type_and_leaves_the_chain_without_tracebacks(
    failing: dict[str, Model],
) -> None:
    answer = _predict(failing["Top"], {"text": "fail"}, **{"x-chains-request-id": "rid-gw-fail"})
    assert answer.status_code == 500
    error = answer.json()["error"]
    # Raised in Leaf, it crossed the gateway to Top as a ValueError; what leaves the chain is
    # its public form (an exported chain is a deployed one): no traceback, no internal hop.
    assert (error["exc_type"], error["exc_module"]) == ("ValueError", "builtins")
    assert error["chainlet"] == "Top" and "leaf refuses 'fail'" in error["message"]
    assert error["request_id"] == "rid-gw-fail"
    assert error["traceback"] == "" and error["cause"] is None


def test_request_id_and_deadline_cross_the_gateway(failing: dict[str, Model]) -> None:
    answer = _predict(
        failing["Top"], {"text": "x"}, **{"x-chains-request-id": "rid-gw-7", "x-chains-timeout": "20"}
    )
    assert answer.status_code == 200, answer.text
    request_id, remaining = answer.json().split()
    assert request_id == "rid-gw-7"
    assert 0 < float(remaining) < 20  # the caller's 20 s, less the time taken, not the stub's 30 s


def _export_calling(models: dict[str, Model], workdir: Path) -> Path:
    """The streaming example exported again, its callers wired to the running models."""
    urls = {name: models[name].predict_url for name in ("Generator", "Words")}
    return export("truss", CHAINS["streaming"], workdir, model_urls=urls).out


async def test_a_wrong_api_key_is_named_by_the_calling_chainlet(
    models: dict[str, Model], tmp_path: Path
) -> None:
    from starlette.requests import Request

    # Entry loaded in this process, with a key the gateway refuses, calling the real Generator.
    with isolated():
        model = await loaded_model(_export_calling(models, tmp_path) / "Entry", {"baseten_api_key": "not-it"})

        async def receive() -> dict[str, object]:
            return {"type": "http.request", "body": json.dumps({"prompt": "a"}).encode(), "more_body": False}

        scope = {
            "type": "http",
            "method": "POST",
            "path": "/predict",
            "headers": [(b"content-type", b"application/json")],
            "query_string": b"",
        }
        response = await model.predict(Request(scope, receive))
    assert response.status_code == 500
    error = json.loads(response.body)["error"]
    assert "Generator at " in error["message"]
    assert "refused the call (401 invalid API key): the credential it was sent is wrong" in error["message"]


async def test_a_caller_without_the_api_key_secret_fails_to_load_naming_it(
    models: dict[str, Model], tmp_path: Path
) -> None:
    entry = _export_calling(models, tmp_path) / "Entry"
    with (
        isolated(),
        pytest.raises(ChainsUsageError, match="secret 'baseten_api_key', which is not set") as info,
    ):
        await loaded_model(entry, secrets={})
    assert "create the secret in the workspace" in str(info.value)
