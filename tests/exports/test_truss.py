"""The truss export: each Truss loads with truss's own tooling, and its model serves the chainlet.

The model is exercised here in this process, handed requests the way the Truss server does
(``predict(request)`` with the raw request, ``load()`` in a worker thread). truss itself runs in
an environment of its own (tests/exports/truss_env.py) to load each config and build each
image's context; test_truss_gateway.py runs truss's own server.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from chains.errors import ChainsUsageError
from tests.exports.conftest import SECRET_VALUES, TRUSS_CHAINS, Export, all_text, export, tree_bytes
from tests.exports.truss_env import truss_python


@pytest.fixture(scope="session")
def truss(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Export]:
    root = tmp_path_factory.mktemp("truss")
    return {name: export("truss", path, root / name) for name, path in TRUSS_CHAINS.items()}


@contextlib.contextmanager
def isolated() -> Iterator[None]:
    """Undo what loading a chainlet does to this process: modules, sys.path, environment."""
    modules, path, environ = dict(sys.modules), list(sys.path), dict(os.environ)
    try:
        yield
    finally:
        for name in set(sys.modules) - set(modules):
            del sys.modules[name]
        sys.modules.update(modules)
        sys.path[:] = path
        os.environ.clear()
        os.environ.update(environ)


async def loaded_model(
    truss_dir: Path, secrets: dict[str, str], extra_env: dict[str, str] | None = None
) -> Any:
    """The Truss model of ``truss_dir``, created and loaded the way the Truss server does it."""
    config = yaml.safe_load((truss_dir / "config.yaml").read_text())
    os.environ.update(config["environment_variables"])  # the platform sets these for the process
    os.environ.update(extra_env or {})
    spec = importlib.util.spec_from_file_location("model.model", truss_dir / "model" / "model.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.Model(config=config, data_dir=truss_dir / "data", secrets=secrets)
    await asyncio.to_thread(model.load)
    return model


def client(model: Any) -> httpx.AsyncClient:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    async def predict(request: Request) -> Response:
        response: Response = await model.predict(request)
        return response

    app = Starlette(routes=[Route("/predict", predict, methods=["POST"])])
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://truss")


def test_layout(truss: dict[str, Export]) -> None:
    for exported in truss.values():
        assert sorted(p.name for p in exported.files) == sorted(s.name for s in exported.chain.chainlets)
        for spec in exported.chain.chainlets:
            directory = exported.out / spec.name
            for rel in [
                "config.yaml",
                "model/model.py",
                "data/chainlet/server.py",
                "packages/chains/__init__.py",
            ]:
                assert (directory / rel).is_file(), rel
            assert not list(directory.rglob("__pycache__"))


def test_config_carries_resources_secrets_and_requirements(truss: dict[str, Export]) -> None:
    config = yaml.safe_load((truss["rich"].out / "Embed_Model" / "config.yaml").read_text())
    assert config["resources"] == {"cpu": "500m", "memory": "1.5Gi", "use_gpu": True, "accelerator": "T4:1"}
    store = yaml.safe_load((truss["rich"].out / "Store" / "config.yaml").read_text())
    assert store["resources"] == {"cpu": "2", "memory": "1G", "use_gpu": False}
    assert config["secrets"] == {"chains_internal_token": None, "hf_token": None}
    assert "numpy>=1.26" in config["requirements"]
    assert any(r.startswith("pydantic") for r in config["requirements"])
    assert config["runtime"] == {"predict_concurrency": 8}
    assert config["model_metadata"]["example_model_input"] == {"text": "hello"}
    assert "CHAINS_DEPENDENCY_URLS" not in config["environment_variables"]


@pytest.mark.parametrize("name", sorted(TRUSS_CHAINS))
def test_no_secret_values_and_the_same_bytes_every_time(
    truss: dict[str, Export], tmp_path: Path, name: str
) -> None:
    text = all_text(truss[name].out)
    assert not any(value in text for value in SECRET_VALUES.values())
    again = export("truss", TRUSS_CHAINS[name], tmp_path)
    assert tree_bytes(again.out) == tree_bytes(truss[name].out)


def test_generated_model_passes_ruff(truss: dict[str, Export]) -> None:
    models = [str(p) for e in truss.values() for p in e.out.glob("*/model/model.py")]
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--isolated", "--line-length", "110", *models],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


async def test_unary_chainlet_answers_through_predict(truss: dict[str, Export]) -> None:
    with isolated():
        model = await loaded_model(truss["hello"].out / "Greeter", secrets={})
        assert await model.is_healthy() is True
        async with client(model) as http:
            # No credentials: an internal chainlet on the platform takes what its gateway let in.
            answer = await http.post("/predict", json={"name": "Ada"})
            assert answer.status_code == 200 and answer.json() == "Hello, Ada!"
            bad = await http.post("/predict", json={"nam": "Ada"})
            assert bad.status_code == 422 and bad.json()["detail"][0]["loc"][-1] == "name"


async def test_streams_keep_their_form(truss: dict[str, Export]) -> None:
    with isolated():
        model = await loaded_model(truss["streaming"].out / "Words", secrets={})
        async with client(model) as http:
            lines = await http.post("/predict", json={"text": "a b"})
            assert lines.status_code == 200
            assert [json.loads(line) for line in lines.text.splitlines()] == [
                {"text": "a", "index": 0},
                {"text": "b", "index": 1},
            ]
            sse = await http.post("/predict", json={"text": "a b"}, headers={"accept": "text/event-stream"})
            assert sse.headers["content-type"].startswith("text/event-stream")
            assert sse.text.count("data: ") >= 2
            framed = await http.post(
                "/predict", json={"text": "a"}, headers={"accept": "application/x-chains-stream"}
            )
            assert framed.headers["content-type"].startswith("application/x-chains-stream")


async def test_declared_secrets_come_from_the_platform(truss: dict[str, Export]) -> None:
    with isolated():
        model = await loaded_model(truss["rich"].out / "Embed_Model", secrets={"hf_token": "abc"})
        async with client(model) as http:
            answer = await http.post("/predict", json={"text": "four"})
            assert answer.json() == [4.0, 3.0]


async def test_a_chainlet_without_its_dependencies_model_urls_says_how_to_give_them(
    truss: dict[str, Export],
) -> None:
    with isolated(), pytest.raises(ChainsUsageError) as info:
        await loaded_model(truss["hello"].out / "Hello", secrets={})
    assert "chainlet Hello calls Greeter, and this Truss has no model URL for it" in str(info.value)
    assert "--model-url Greeter=https://model-MODEL_ID.api.baseten.co/environments/production/predict" in str(
        info.value
    )


PREDICT = "https://model-ab12cd.api.baseten.co/environments/production/predict"


def test_model_urls_wire_the_callers_to_the_gateway_with_the_api_key(tmp_path: Path) -> None:
    exported = export("truss", TRUSS_CHAINS["streaming"], tmp_path, model_urls={"Generator": PREDICT})
    entry = yaml.safe_load((exported.out / "Entry" / "config.yaml").read_text())
    assert json.loads(entry["environment_variables"]["CHAINS_DEPENDENCY_URLS"]) == {
        "Generator": {
            "urls": ["https://model-ab12cd.api.baseten.co"],
            "path": "/environments/production/predict",
            "auth": {"scheme": "Api-Key", "secret": "baseten_api_key"},
        }
    }
    assert "baseten_api_key" in entry["secrets"]
    header = (exported.out / "Entry" / "config.yaml").read_text().split("model_name:")[0]
    assert f"--model-url Generator={PREDICT}" in header  # the command that writes it again
    assert "Not given yet: Words" in header and "--model-url Words=<its predict URL>" in header
    # A chainlet that calls nothing needs no API key.
    generator = yaml.safe_load((exported.out / "Generator" / "config.yaml").read_text())
    assert "baseten_api_key" not in generator["secrets"]
    assert "CHAINS_DEPENDENCY_URLS" not in generator["environment_variables"]


@pytest.mark.parametrize(
    ("model_urls", "message"),
    [
        ({"Nope": PREDICT}, "chain streaming has no chainlet Nope"),
        ({"Entry": PREDICT}, "no chainlet of chain streaming calls Entry"),
        ({"Words": "https://model-ab12cd.api.baseten.co"}, "the URL names no endpoint"),
        ({"Words": "model-ab12cd.api.baseten.co/predict"}, "give the model's predict URL"),
        ({"Words": PREDICT + "?x=1"}, "give the model's predict URL"),
    ],
)
def test_a_wrong_model_url_is_refused_naming_it(
    tmp_path: Path, model_urls: dict[str, str], message: str
) -> None:
    with pytest.raises(ChainsUsageError, match=message):
        export("truss", TRUSS_CHAINS["streaming"], tmp_path, model_urls=model_urls)


# -- truss itself ---------------------------------------------------------------------------------


_CHECK = """
import json, pathlib, subprocess, sys
from truss.base.truss_config import TrussConfig
bin_dir = pathlib.Path(sys.executable).parent
report = {}
for arg in sys.argv[1:]:
    directory = pathlib.Path(arg)
    config = TrussConfig.from_yaml(directory / "config.yaml")
    config.validate_forbid_extra()
    build = directory.parent / (".build-" + directory.name)
    result = subprocess.run([str(bin_dir / "truss"), "image", "build-context", str(build), str(directory),
                             "--non-interactive"], capture_output=True, text=True)
    report[directory.name] = {
        "cpu": config.resources.cpu, "memory": config.resources.memory,
        "accelerator": [str(getattr(config.resources.accelerator.accelerator, "value", None)),
                        config.resources.accelerator.count, config.resources.use_gpu],
        "secrets": sorted(config.secrets), "requirements": config.requirements,
        "build_rc": result.returncode, "build_err": result.stderr[-2000:],
        "build_files": sorted(p.name for p in build.iterdir()) if build.exists() else [],
        "dockerfile": (build / "Dockerfile").read_text() if (build / "Dockerfile").exists() else "",
    }
print(json.dumps(report))
"""


def test_truss_loads_every_config_and_builds_every_context(truss: dict[str, Export]) -> None:
    python = truss_python()
    directories = [str(e.out / s.name) for e in truss.values() for s in e.chain.chainlets]
    result = subprocess.run(
        [str(python), "-c", _CHECK, *directories], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.splitlines()[-1])
    assert len(report) == len(directories)
    for name, entry in report.items():
        assert entry["build_rc"] == 0, (name, entry["build_err"])
        assert {"Dockerfile", "model", "data", "packages", "requirements.txt"} <= set(entry["build_files"]), (
            name
        )
        assert "./packages /packages" in entry["dockerfile"] and "./data" in entry["dockerfile"]
        assert "chains_internal_token" in entry["secrets"]
    assert report["Embed_Model"]["cpu"] == "500m" and "numpy>=1.26" in report["Embed_Model"]["requirements"]
    # truss's own reading of the GPU: a T4, one of them, and the model asks for a GPU.
    assert report["Embed_Model"]["accelerator"] == ["T4", 1, True]
    assert report["Store"]["accelerator"] == ["None", 1, False]


def test_a_websocket_chainlet_is_configured_for_the_websocket_transport(truss: dict[str, Export]) -> None:
    for name in ("Relay", "Transform"):
        config = yaml.safe_load((truss["realtime"].out / name / "config.yaml").read_text())
        assert config["runtime"]["transport"] == {"kind": "websocket"}
        model = (truss["realtime"].out / name / "model" / "model.py").read_text()
        assert "async def websocket(" in model and "def predict(" not in model
    hello = yaml.safe_load((truss["hello"].out / "Greeter" / "config.yaml").read_text())
    assert "transport" not in hello["runtime"]


async def test_a_websocket_chainlet_converses_through_the_models_websocket_method(
    truss: dict[str, Export],
) -> None:
    from starlette.applications import Starlette
    from starlette.routing import WebSocketRoute
    from starlette.testclient import TestClient
    from starlette.websockets import WebSocket

    with isolated():
        model = await loaded_model(truss["realtime"].out / "Transform", secrets={})

        async def endpoint(websocket: WebSocket) -> None:
            await model.websocket(websocket)

        def talk() -> list[Any]:
            app = Starlette(routes=[WebSocketRoute("/websocket", endpoint)])
            with TestClient(app) as test_client, test_client.websocket_connect("/websocket") as ws:
                ws.send_text("hello")
                text = ws.receive_text()
                ws.send_bytes(b"abc")
                return [text, ws.receive_bytes()]

        assert await asyncio.to_thread(talk) == ["HELLO", b"cba"]
