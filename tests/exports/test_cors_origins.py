"""The entrypoint's allowed web origins reach every target's environment, and only the entrypoint's."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
import yaml

from chains.loader import load_chain
from chains.targets import PushOptions, export_target, options_for
from chains.targets.environment import chainlet_environment
from tests.helpers import write_chain

CHAIN = """
import chains


class Helper(chains.ChainletBase):
    async def run_remote(self, text: str) -> str:
        return text


@chains.mark_entrypoint("web")
class Front(chains.ChainletBase):
    remote_config = chains.RemoteConfig(cors_origins=["https://app.example"])

    def __init__(self, helper: Helper = chains.depends(Helper)) -> None:
        self._helper = helper

    async def run_remote(self, text: str) -> str:
        return await self._helper.run_remote(text)
"""
BOTH = "https://app.example,http://127.0.0.1:8080"


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_chain(tmp_path_factory.mktemp("cors"), CHAIN)


def _export(target: str, source: Path, workdir: Path) -> Path:
    options = options_for(target, out_dir=Path("out"), cors_origins=("http://127.0.0.1:8080",))
    workdir.mkdir(parents=True, exist_ok=True)
    with contextlib.chdir(workdir):
        export_target(target).export(load_chain(source), source, options)
    return workdir / "out"


def _yaml(path: Path) -> list[Any]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def test_kubernetes(source: Path, tmp_path: Path) -> None:
    out = _export("kubernetes", source, tmp_path)
    envs = {}
    for file in out.glob("*.yaml"):
        for doc in _yaml(file):
            if doc.get("kind") == "Deployment":
                spec = doc["spec"]["template"]["spec"]["containers"][0]
                envs[doc["metadata"]["name"]] = {e["name"]: e.get("value") for e in spec["env"]}
    assert envs["web-front"]["CHAINS_CORS_ORIGINS"] == BOTH
    assert "CHAINS_CORS_ORIGINS" not in envs["web-helper"]


def test_compose(source: Path, tmp_path: Path) -> None:
    out = _export("compose", source, tmp_path)
    services = _yaml(out / "compose.yaml")[0]["services"]
    assert services["web-front"]["environment"]["CHAINS_CORS_ORIGINS"] == BOTH
    assert "CHAINS_CORS_ORIGINS" not in services["web-helper"]["environment"]
    assert "--cors-origin http://127.0.0.1:8080" in (out / "compose.yaml").read_text()


def test_truss(source: Path, tmp_path: Path) -> None:
    out = _export("truss", source, tmp_path)
    front = yaml.safe_load((out / "Front" / "config.yaml").read_text())
    helper = yaml.safe_load((out / "Helper" / "config.yaml").read_text())
    assert front["environment_variables"]["CHAINS_CORS_ORIGINS"] == BOTH
    assert "CHAINS_CORS_ORIGINS" not in helper["environment_variables"]


def test_local_and_docker(source: Path) -> None:
    # The docker target starts its containers with this same environment.
    chain = load_chain(source)
    options = PushOptions(cors_origins=("http://127.0.0.1:8080",))
    front = chainlet_environment(chain, chain.get("Front"), "token", options, "local")
    assert front["CHAINS_CORS_ORIGINS"] == BOTH
    helper = chainlet_environment(chain, chain.get("Helper"), "token", options, "local")
    assert "CHAINS_CORS_ORIGINS" not in helper


def test_ray(source: Path) -> None:
    from chains.targets import ray

    chain = load_chain(source)
    options = PushOptions(cors_origins=("http://127.0.0.1:8080",))
    front = ray._environment(chain, chain.entrypoint, "token", "http://127.0.0.1:8000", options, None, {})
    helper = ray._environment(chain, chain.get("Helper"), "token", "http://127.0.0.1:8000", options, None, {})
    assert front["CHAINS_CORS_ORIGINS"] == BOTH
    assert "CHAINS_CORS_ORIGINS" not in helper


def test_an_entrypoint_without_origins_gets_none(tmp_path: Path) -> None:
    source = write_chain(
        tmp_path,
        CHAIN.replace('remote_config = chains.RemoteConfig(cors_origins=["https://app.example"])', ""),
    )
    chain = load_chain(source)
    front = chainlet_environment(chain, chain.get("Front"), "token", PushOptions(), "local")
    assert "CHAINS_CORS_ORIGINS" not in front


def test_the_cli_takes_repeated_origins_and_refuses_a_bad_one(source: Path, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from chains.cli import main

    with contextlib.chdir(tmp_path):
        base = ["push", str(source), "--target", "compose", "--dry-run", "--out", "out"]
        result = CliRunner().invoke(main, [*base, "--cors-origin", "http://a.test:81", "--cors-origin", "*"])
        assert result.exit_code == 0, result.output
        services = _yaml(tmp_path / "out" / "compose.yaml")[0]["services"]
        assert (
            services["web-front"]["environment"]["CHAINS_CORS_ORIGINS"]
            == "https://app.example,http://a.test:81,*"
        )
        result = CliRunner().invoke(main, [*base, "--cors-origin", "https://a.test/app"])
    assert result.exit_code == 1
    assert "CORS origin 'https://a.test/app' has a path" in result.output
