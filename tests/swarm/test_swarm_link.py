"""What crosses the wire between the two nodes: a sniffer on the veth link between them looks
for the chain's internal token in the overlay's packets while calls cross from node to node."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.helpers import write_chain
from tests.swarm.conftest import Cli, Swarm, remove_stack, service_tasks

WIRE = """
    import chains


    class Far(chains.ChainletBase):
        remote_config = chains.RemoteConfig(compute=chains.Compute(replicas=2, cpu_count=0.5, memory="300Mi"))

        async def run_remote(self, text: str) -> str:
            return text.upper()


    @chains.mark_entrypoint("sw-wire")
    class Near(chains.ChainletBase):
        def __init__(self, far: Far = chains.depends(Far)) -> None:
            self._far = far

        async def run_remote(self, text: str) -> str:
            return await self._far.run_remote(text)
"""
CAPTURE_SEC = 20
CAPTURE_PACKETS = 400


def _sniff(swarm: Swarm, url: str, pcap: Path) -> bytes:
    """Capture the overlay's packets on the link (VXLAN, or ESP when encrypted) while calls
    go from Near (node 1) to Far (one replica on each node); the capture's bytes."""
    if shutil.which("tcpdump") is None:
        pytest.fail("tcpdump is missing: apt-get install tcpdump", pytrace=False)
    sniffer = subprocess.Popen(
        [
            "tcpdump",
            "-i",
            swarm.link,
            "-U",
            "-s",
            "0",
            "-c",
            str(CAPTURE_PACKETS),
            "-w",
            str(pcap),
            "udp port 4789 or esp",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        time.sleep(1.0)  # tcpdump listening
        deadline = time.monotonic() + CAPTURE_SEC
        with httpx.Client(timeout=30) as client:
            for i in range(40):
                if time.monotonic() > deadline or sniffer.poll() is not None:
                    break
                answer = client.post(f"{url}/run_remote", json={"text": f"word {i}"})
                assert answer.status_code == 200 and answer.json() == f"WORD {i}"
    finally:
        if sniffer.poll() is None:
            sniffer.terminate()
        sniffer.wait(10)
    return pcap.read_bytes()


def _token(swarm: Swarm) -> bytes:
    container = swarm.docker(
        "ps", "--filter", "label=com.docker.swarm.service.name=sw-wire_sw-wire-near", "--format", "{{.Names}}"
    ).split()[0]
    token = swarm.docker("exec", container, "cat", "/run/secrets/CHAINS_INTERNAL_TOKEN").encode()
    assert len(token) >= 32
    return token


@pytest.fixture
def wire_chain(swarm: Swarm, tmp_path: Path, cache_dir: Path) -> Iterator[tuple[Cli, Path]]:
    remove_stack(swarm, "sw-wire")
    yield Cli(swarm, tmp_path / "home", cache_dir, encrypt=False), write_chain(tmp_path / "chain", WIRE)
    remove_stack(swarm, "sw-wire")


def _push(swarm: Swarm, cli: Cli, file: Path) -> str:
    url: str = cli.push(str(file), "--timeout", "180")["entrypoint_url"]
    nodes = {t["NodeID"] for t in service_tasks(swarm, "sw-wire_sw-wire-far") if t["State"] == "running"}
    assert nodes == set(swarm.node_ids())  # calls to Far cross the link half of the time
    return url


def test_without_encryption_the_sniffer_sees_the_token(
    swarm: Swarm, wire_chain: tuple[Cli, Path], tmp_path: Path
) -> None:
    """The check below is real: on an unencrypted overlay the token crosses the link in clear."""
    cli, file = wire_chain
    url = _push(swarm, cli, file)
    captured = _sniff(swarm, url, tmp_path / "clear.pcap")
    assert _token(swarm) in captured
    cli.run("stop", "sw-wire")


def test_an_encrypted_overlay_hides_the_token_on_the_link(
    swarm: Swarm, wire_chain: tuple[Cli, Path], tmp_path: Path, cache_dir: Path
) -> None:
    if not swarm.ipsec:
        pytest.skip(
            "this kernel cannot do IPsec ESP with AES-GCM (rfc4106(gcm(aes))), which an encrypted overlay "
            "network needs: the swarm would drop its traffic between nodes"
        )
    _, file = wire_chain
    cli = Cli(swarm, tmp_path / "home-encrypted", cache_dir, encrypt=True)
    url = _push(swarm, cli, file)
    captured = _sniff(swarm, url, tmp_path / "encrypted.pcap")
    assert len(captured) > 10_000  # packets were captured: ESP
    assert _token(swarm) not in captured
    cli.run("stop", "sw-wire")
