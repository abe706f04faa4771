"""Pushes the swarm target refuses, before it builds anything, saying what to do instead."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import write_chain
from tests.swarm.conftest import ROOT, Cli, Swarm

STREAMING = ROOT / "examples" / "streaming" / "chain.py"


def test_a_swarm_of_two_nodes_without_their_engines_is_refused(
    swarm: Swarm, tmp_path: Path, cache_dir: Path
) -> None:
    cli = Cli(swarm, tmp_path / "home", cache_dir)
    cli.env["CHAINS_SWARM_NODES"] = ""
    result = cli.run("push", str(STREAMING), "--name", "sw-refused", "--target", "swarm", check=False)
    assert result.returncode != 0
    assert "the swarm has 2 nodes" in result.stderr and "CHAINS_SWARM_NODES" in result.stderr
    assert "Traceback" not in result.stderr
    assert "sw-refused" not in swarm.docker("service", "ls")


def test_an_engine_that_is_no_manager_is_refused(swarm: Swarm, tmp_path: Path, cache_dir: Path) -> None:
    cli = Cli(swarm, tmp_path / "home", cache_dir)
    cli.env["DOCKER_HOST"] = swarm.node2  # a worker
    result = cli.run("push", str(STREAMING), "--name", "sw-refused", "--target", "swarm", check=False)
    assert result.returncode != 0
    assert "is not a swarm manager" in result.stderr and "DOCKER_HOST" in result.stderr
    assert "Traceback" not in result.stderr


TWO_ENTRYPOINTS = """
    import chains


    @chains.mark_entrypoint("sw-two-entries")
    class Entry(chains.ChainletBase):
        remote_config = chains.RemoteConfig(compute=chains.Compute(replicas=2))

        async def run_remote(self, text: str) -> str:
            return text
"""


def test_more_entrypoint_replicas_than_managers_is_refused(
    swarm: Swarm, tmp_path: Path, cache_dir: Path
) -> None:
    cli = Cli(swarm, tmp_path / "home", cache_dir)
    file = write_chain(tmp_path / "chain", TWO_ENTRYPOINTS)
    result = cli.run("push", str(file), "--target", "swarm", check=False)
    assert result.returncode != 0
    assert "asks for 2 replicas and the swarm has 1 manager node(s)" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
