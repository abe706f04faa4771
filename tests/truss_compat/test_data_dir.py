"""DockerImage(data_dir=...): the folder travels with the chainlet and is its context.data_dir."""

from __future__ import annotations

from pathlib import Path

import httpx

from chains.loader import load_chain
from chains_codegen import generate
from tests.helpers import Cli

CHAIN = """
import chains


@chains.mark_entrypoint
class Reader(chains.ChainletBase):
    remote_config = chains.RemoteConfig(docker_image=chains.DockerImage(data_dir="assets"))

    def __init__(self, context: chains.DeploymentContext = chains.depends_context()) -> None:
        assert context.data_dir is not None
        self._greeting = (context.data_dir / "greeting.txt").read_text()
        self._nested = (context.data_dir / "deep" / "more.txt").read_text()

    async def run_remote(self) -> str:
        return self._greeting + self._nested
"""


def _write(folder: Path, greeting: str = "hello ") -> Path:
    (folder / "assets" / "deep").mkdir(parents=True, exist_ok=True)
    (folder / "assets" / "greeting.txt").write_text(greeting)
    (folder / "assets" / "deep" / "more.txt").write_text("from the data dir")
    file = folder / "chain.py"
    file.write_text(CHAIN)
    return file


def test_the_data_dir_is_copied_into_the_generated_chainlet_and_its_image(tmp_path: Path) -> None:
    file = _write(tmp_path / "src")
    first = generate(load_chain(file), file, tmp_path / "out").chainlets["Reader"]
    directory = first.directory
    assert (directory / "data" / "deep" / "more.txt").read_text() == "from the data dir"
    assert "COPY --chown=chains:chains data/ ./data/" in (directory / "Dockerfile").read_text()
    assert 'data_dir=_HERE / "data",' in (directory / "server.py").read_text()
    # A changed data file is a changed chainlet: a re-push replaces it.
    (tmp_path / "src" / "assets" / "greeting.txt").write_text("hi ")
    second = generate(load_chain(file), file, tmp_path / "out").chainlets["Reader"]
    assert second.code_version != first.code_version


def test_a_missing_data_dir_names_the_chainlet_and_the_path(tmp_path: Path) -> None:
    file = tmp_path / "chain.py"
    file.write_text(CHAIN)
    result = Cli(tmp_path / "home").run(
        "push", str(file), "--dry-run", "--out", str(tmp_path / "out"), check=False
    )
    assert result.returncode == 1
    assert "chainlet Reader: DockerImage(data_dir='assets') is not a folder" in result.stderr


def test_a_pushed_chainlet_reads_its_data_dir(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "home")
    pushed = cli.push(str(_write(tmp_path / "src")), "--name", "data-dir")
    try:
        answer = httpx.post(pushed["entrypoint_url"] + "/run_remote", json={}, timeout=30)
    finally:
        cli.run("stop", "data-dir", check=False)
    assert answer.json() == "hello from the data dir"
