"""Pushes the swarm target refuses, saying what to do instead: before it builds anything, or,
for an overlay network that does not carry calls between the nodes, once it runs."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.helpers import unique_port, write_chain
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


CROSSING = """
    import chains


    class Worker(chains.ChainletBase):
        remote_config = chains.RemoteConfig(compute=chains.Compute(replicas=2, cpu_count=0.5))

        async def run_remote(self, text: str) -> str:
            return text.upper()


    @chains.mark_entrypoint("sw-crossing")
    class Entry(chains.ChainletBase):
        def __init__(self, worker: Worker = chains.depends(Worker, retries=2)) -> None:
            self._worker = worker

        async def run_remote(self, text: str) -> str:
            return await self._worker.run_remote(text)
"""


def test_an_encrypted_overlay_the_kernel_cannot_carry_is_refused_with_the_fix(
    swarm: Swarm, tmp_path: Path, cache_dir: Path
) -> None:
    """Without IPsec in the kernel every service turns healthy (each checks itself on its own
    node) and every call to Worker's replica on node 2 would fail: the push calls across the
    nodes and refuses, naming CHAINS_SWARM_ENCRYPT=0; with it, the same push works."""
    if swarm.ipsec:
        pytest.skip("this kernel can do IPsec ESP with AES-GCM: its encrypted overlay carries the calls")
    file = write_chain(tmp_path / "chain", CROSSING)
    cli = Cli(swarm, tmp_path / "home", cache_dir, encrypt=True)
    try:
        port = str(unique_port())  # the entrypoint's, published on node 1: this machine
        result = cli.run(
            "push", str(file), "--target", "swarm", "--port", port, "--timeout", "180", check=False
        )
        assert result.returncode != 0, result.stdout
        assert "the stack's overlay network does not carry calls between the swarm's nodes" in result.stderr
        assert "on node chains-node2" in result.stderr and "CHAINS_SWARM_ENCRYPT=0" in result.stderr
        assert "Traceback" not in result.stderr
        assert "sw-crossing" not in swarm.docker("service", "ls")
        assert swarm.docker("secret", "ls", "-q", "--filter", "label=chains.chain=sw-crossing") == ""

        cli.env["CHAINS_SWARM_ENCRYPT"] = "0"  # the fix the refusal names
        pushed = cli.push(str(file), "--timeout", "180", "--port", port)
        for _ in range(4):  # round robin over both replicas
            answer = httpx.post(f"{pushed['entrypoint_url']}/run_remote", json={"text": "hi"}, timeout=30)
            assert answer.status_code == 200 and answer.json() == "HI", answer.text
    finally:
        cli.run("stop", "sw-crossing", check=False)
