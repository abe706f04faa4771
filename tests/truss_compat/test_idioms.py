"""Truss Chains' authoring idioms and configuration vocabulary, accepted as Truss files write them."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import chains
from chains.loader import load_chain
from chains.targets import ignored_settings

UNANNOTATED = """
import chains


class Leaf(chains.ChainletBase):
    async def run_remote(self, x: int) -> int:
        return x * 2


@chains.mark_entrypoint
class Entry(chains.ChainletBase):
    def __init__(self, leaf=chains.depends(Leaf, 3, 5.0), context=chains.depends_context()) -> None:
        self._leaf = leaf
        self._context = context

    async def run_remote(self, x: int) -> int:
        return await self._leaf.run_remote(x) + 1
"""


def _write(tmp_path: Path, source: str, name: str = "chain.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return path


def test_unannotated_dependencies_take_their_class_from_the_marker(tmp_path: Path) -> None:
    chain = load_chain(_write(tmp_path, UNANNOTATED))
    entry = chain.get("Entry")
    (dep,) = entry.dependencies
    assert dep.chainlet_cls.__name__ == "Leaf"
    assert (dep.marker.retries, dep.marker.timeout_sec) == (3, 5.0)
    assert entry.context_param == "context"


async def test_an_unannotated_chain_runs_locally(tmp_path: Path) -> None:
    chain = load_chain(_write(tmp_path, UNANNOTATED))
    with chains.run_local():
        entry = chain.entrypoint.cls()
        assert await entry.run_remote(20) == 41


class PlainLeaf(chains.ChainletBase):
    async def run_remote(self) -> None:
        return None


def test_depends_takes_truss_positional_order() -> None:
    marker = chains.depends(PlainLeaf, 4, 12.5, True, 7)
    assert (marker.retries, marker.timeout_sec, marker.use_binary, marker.concurrency_limit) == (  # type: ignore[attr-defined]
        4,
        12.5,
        True,
        7,
    )


def test_compute_takes_truss_positional_order_and_predict_concurrency() -> None:
    compute = chains.Compute(2, "4Gi", "A10G", 2, 8)
    assert (compute.cpu_count, compute.memory, compute.gpu, compute.gpu_count, compute.concurrency) == (
        2,
        "4Gi",
        "A10G",
        2,
        8,
    )
    assert chains.Compute(cpu_count=3, predict_concurrency="cpu_count").concurrency == 3
    with pytest.raises(chains.ChainsUsageError, match="not both"):
        chains.Compute(predict_concurrency=2, concurrency=3)
    with pytest.raises(chains.ChainsUsageError, match="cpu_count both by position and by name"):
        chains.Compute(2, cpu_count=3)  # type: ignore[misc]
    with pytest.raises(chains.ChainsUsageError, match="at most 6 positional arguments"):
        chains.Compute(1, "1Gi", None, 1, 1, None, 9)  # type: ignore[call-arg, misc]


def test_docker_image_accepts_truss_images_and_the_older_requirements_name() -> None:
    custom = chains.DockerImage(base_image=chains.CustomImage(image="python:3.11-slim"))
    assert custom.base_image_reference == "python:3.11-slim"
    assert chains.DockerImage(base_image=chains.BasetenImage.PY311).base_image_reference is None
    assert chains.DockerImage(base_image="debian:12").base_image_reference == "debian:12"
    image = chains.DockerImage(pip_requirements_file="reqs.txt")
    assert image.requirements_file == "reqs.txt"
    with pytest.raises(chains.ChainsUsageError, match="not both"):
        chains.DockerImage(pip_requirements_file="a.txt", requirements_file="b.txt")


def test_assets_take_truss_positional_order() -> None:
    assets = chains.Assets([{"repo_id": "org/model"}], ["hf_token"])
    assert assets.cached == [{"repo_id": "org/model"}]
    assert assets.secret_keys == ["hf_token"]


def test_make_abs_path_here_resolves_against_the_calling_module(tmp_path: Path) -> None:
    helper = tmp_path / "pkg" / "helper.py"
    helper.parent.mkdir()
    helper.write_text("import chains\nPATH = chains.make_abs_path_here('requirements.txt')\n")
    namespace: dict[str, object] = {"__file__": str(helper)}
    exec(compile(helper.read_text(), str(helper), "exec"), namespace)
    assert namespace["PATH"] == str(tmp_path / "pkg" / "requirements.txt")


BASETEN_ONLY = """
import chains


@chains.mark_entrypoint
class Entry(chains.ChainletBase):
    remote_config = chains.RemoteConfig(
        docker_image=chains.DockerImage(base_image=chains.BasetenImage.PY310),
        compute=chains.Compute(instance_type="H100:8x80"),
        assets=chains.Assets(cached=[{"repo_id": "org/model"}]),
        options=chains.ChainletOptions(
            health_checks={"restart_threshold_seconds": 30}, metadata={"team": "a"}
        ),
        build_commands=["echo built > /built.txt"],
    )

    async def run_remote(self) -> str:
        return "ok"
"""


def test_baseten_only_settings_are_named_for_each_target(tmp_path: Path) -> None:
    chain = load_chain(_write(tmp_path, BASETEN_ONLY))
    local = "\n".join(ignored_settings(chain, "local"))
    for label in ("BasetenImage", "instance_type", "cached", "health_checks", "build_commands"):
        assert label in local
    docker = "\n".join(ignored_settings(chain, "docker"))
    assert "build_commands" not in docker  # images run them
    assert "instance_type" in docker
    assert ignored_settings(chain, "truss") == []


def test_the_truss_export_writes_baseten_only_settings(tmp_path: Path) -> None:
    import yaml

    from chains.cli import main

    source = _write(tmp_path, BASETEN_ONLY)
    out = tmp_path / "out"
    result = main.main(
        ["push", str(source), "--target", "truss", "--dry-run", "--out", str(out)], standalone_mode=False
    )
    assert result is None
    (config_file,) = out.glob("*/config.yaml")
    config = yaml.safe_load(config_file.read_text())
    assert config["python_version"] == "py310"
    assert config["resources"]["instance_type"] == "H100:8x80"
    assert config["model_cache"] == [{"repo_id": "org/model"}]
    assert config["runtime"]["health_checks"] == {"restart_threshold_seconds": 30}
    assert config["build_commands"] == ["echo built > /built.txt"]
    assert config["model_metadata"]["user"] == {"team": "a"}


def test_build_commands_are_run_lines_of_the_dockerfile(tmp_path: Path) -> None:
    from chains_codegen import generate

    (tmp_path / "src").mkdir()
    source = _write(tmp_path / "src", BASETEN_ONLY)
    chain = load_chain(source)
    result = generate(chain, source, tmp_path / "build")
    dockerfile = (result.chainlets["Entry"].directory / "Dockerfile").read_text()
    assert "RUN echo built > /built.txt" in dockerfile
    assert dockerfile.index("RUN echo built") < dockerfile.index("COPY --chown=chains:chains src/")


def test_retrying_user_errors_is_an_explicit_choice() -> None:
    from chains.stubs import StubOptions

    default = StubOptions.from_marker(chains.depends(PlainLeaf))  # type: ignore[arg-type]
    chosen = StubOptions.from_marker(chains.depends(PlainLeaf, retry_user_errors=True))  # type: ignore[arg-type]
    chain_wide = StubOptions.from_marker(chains.depends(PlainLeaf), retry_user_errors=True)  # type: ignore[arg-type]
    assert (default.retry_user_errors, chosen.retry_user_errors, chain_wide.retry_user_errors) == (
        False,
        True,
        True,
    )


DEBUG_LOGS = """
import logging

import chains


@chains.mark_entrypoint
class Chatty(chains.ChainletBase):
    remote_config = chains.RemoteConfig(options=chains.ChainletOptions(enable_debug_logs=True))

    async def run_remote(self) -> str:
        logging.getLogger("chatty").debug("a debug line from the chainlet")
        return "ok"
"""


def test_enable_debug_logs_sets_the_chainlets_log_level(tmp_path: Path) -> None:
    from tests.helpers import Cli

    cli = Cli(tmp_path / "home")
    pushed = cli.push(str(_write(tmp_path, DEBUG_LOGS)), "--name", "chatty")
    try:
        assert cli.run("call", "chatty").stdout.strip() == '"ok"'
        logs = cli.run("logs", "chatty").stdout
    finally:
        cli.run("stop", "chatty", check=False)
    assert pushed["name"] == "chatty"
    assert "DEBUG Chatty" in logs and "a debug line from the chainlet" in logs


MODEL_IN_A_CHAIN = """
import chains


class Labels(chains.ModelBase):
    def __init__(self) -> None:
        self.loads = 0

    def load(self) -> None:
        self.loads += 1
        self._labels = ["cat", "dog"]

    async def predict(self, index: int) -> str:
        return f"{self._labels[index]} (loaded {self.loads}x)"


@chains.mark_entrypoint
class Entry(chains.ChainletBase):
    def __init__(self, labels=chains.depends(Labels)) -> None:
        self._labels = labels

    async def run_remote(self, index: int) -> str:
        return await self._labels.run_remote(index)
"""


async def test_a_model_is_loaded_once_and_called_by_a_chainlet(tmp_path: Path) -> None:
    chain = load_chain(_write(tmp_path, MODEL_IN_A_CHAIN))
    assert [spec.name for spec in chain.chainlets] == ["Labels", "Entry"]
    with chains.run_local():
        entry = chain.entrypoint.cls()
        assert await entry.run_remote(1) == "dog (loaded 1x)"
        assert await entry.run_remote(0) == "cat (loaded 1x)"
