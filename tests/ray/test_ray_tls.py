"""Ray's TLS on the link between the nodes: calls that carry the chain's token cross from the
head (Serve's proxy) to a replica on the worker inside Ray's encrypted gRPC, never in clear.

The cluster of this session runs with ``RAY_USE_TLS=1`` and certificates made by chains
(``tests/ray/cluster.py``). Both nodes are on this machine's loopback, so "the link" is the
traffic to the worker's sockets (its node address, 127.0.0.3): the proxy, on the head,
reaches the worker's replicas there. A connection's other end is 127.0.0.1 (the kernel's
source address on loopback), so the capture is filtered on the worker's address alone.
"""

from __future__ import annotations

import asyncio
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from chains.targets.ray import replicas
from tests.ray.cluster import HEAD_IP, WORKER_IP, RayCluster
from tests.ray.conftest import SAMPLES, Cli, record
from tests.ray.test_ray_target import _record, _token

pytestmark = pytest.mark.ray

PAIR = SAMPLES / "pair.py"
ROUNDS = 4
CONCURRENT = 6
WORDS_PER_CALL = 4000  # a body of about 100 KB: what crosses is easy to tell from Ray's own chatter
TLS_HANDSHAKE = (b"\x16\x03\x01", b"\x16\x03\x03")
TLS_APPLICATION_DATA = b"\x17\x03\x03"


@dataclass(frozen=True)
class Segment:
    source: str
    destination: str
    payload: bytes


def _segments(pcap: bytes) -> list[Segment]:
    """Every IPv4 TCP segment with a payload in a capture of the loopback interface (which
    Linux captures with an Ethernet header of zeros)."""
    found = []
    offset = 24  # the pcap file header
    while offset + 16 <= len(pcap):
        length = int.from_bytes(pcap[offset + 8 : offset + 12], "little")
        frame = pcap[offset + 16 : offset + 16 + length]
        offset += 16 + length
        if frame[12:14] != b"\x08\x00" or len(frame) < 34 or frame[14 + 9] != 6:
            continue  # not IPv4/TCP
        ip = frame[14:]
        tcp = ip[(ip[0] & 0x0F) * 4 :]
        payload = tcp[(tcp[12] >> 4) * 4 :]
        if payload:
            found.append(Segment(".".join(map(str, ip[12:16])), ".".join(map(str, ip[16:20])), payload))
    return found


def _capture(pcap: Path, during: Callable[[], None]) -> bytes:
    """Loopback traffic to and from the worker's address while ``during`` runs."""
    tcpdump = shutil.which("tcpdump")
    if tcpdump is None:
        pytest.fail("tcpdump is missing: apt-get install tcpdump", pytrace=False)
    sniffer = subprocess.Popen(
        [tcpdump, "-i", "lo", "-U", "-s", "0", "-w", str(pcap), f"tcp and host {WORKER_IP}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        time.sleep(1.0)  # tcpdump listening
        if sniffer.poll() is not None:
            said = sniffer.stderr.read().decode(errors="replace") if sniffer.stderr else ""
            pytest.fail(f"tcpdump exited: {said}")
        during()
        time.sleep(0.5)  # the last segments written
    finally:
        if sniffer.poll() is None:
            sniffer.send_signal(signal.SIGINT)
        try:
            sniffer.wait(10)
        except subprocess.TimeoutExpired:
            sniffer.kill()
            sniffer.wait(10)
    return pcap.read_bytes()


def test_the_chains_token_crosses_to_the_other_node_only_inside_rays_tls(
    cli: Cli, ray_cluster: RayCluster, tmp_path: Path
) -> None:
    if ray_cluster.tls_env.get("RAY_USE_TLS") != "1":
        pytest.skip("the cluster runs without Ray's TLS (CHAINS_TEST_RAY_TLS=0)")
    cli.push(str(PAIR))
    info = _record(cli.home, "ray-pair")
    found = replicas(str(info["dashboard_url"]), dict(info["apps"]))  # type: ignore[call-overload]
    # Upper, called below with the chain's token as Entry calls it, has a replica on each node,
    # taking one call at a time: the proxy, on the head, sends what its own node's replica has
    # no room for across to the worker's.
    upper = {r.node_ip for r in found if r.chainlet == "Upper" and r.state == "RUNNING"}
    assert upper == {HEAD_IP, WORKER_IP}, found
    token = _token(cli.home, "ray-pair")
    marker = f"sniffed-{secrets.token_hex(8)}"
    words = [marker] * WORDS_PER_CALL
    url = f"{ray_cluster.proxy_url}/ray-pair/Upper/run_remote"

    async def concurrent_calls() -> None:
        headers = {"authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(timeout=60) as client:
            for _ in range(ROUNDS):
                answers = await asyncio.gather(
                    *(client.post(url, json={"words": words}, headers=headers) for _ in range(CONCURRENT))
                )
                for answer in answers:
                    assert answer.status_code == 200, answer.text[:300]
                    assert answer.json() == [marker.upper()] * WORDS_PER_CALL

    def calls() -> None:
        asyncio.run(concurrent_calls())

    captured = _capture(tmp_path / "link.pcap", calls)
    segments = _segments(captured)
    # The control: the sniffer saw the link, and the calls cross it, as TLS: handshakes (the
    # proxy's first call to the new replica), and application data to the worker adding up to
    # several calls' bodies (Ray's own traffic over the same seconds is far less).
    to_worker = [s for s in segments if s.destination == WORKER_IP]
    handshakes = [s for s in segments if s.payload.startswith(TLS_HANDSHAKE)]
    assert handshakes, f"{len(segments)} segments captured, no TLS handshake among them"
    body = len(marker) * WORDS_PER_CALL
    sent = sum(len(s.payload) for s in to_worker)
    assert sent > 4 * body, f"only {sent} bytes went to the worker; one call's body is {body}"
    assert any(s.payload.startswith(TLS_APPLICATION_DATA) for s in to_worker)
    record(
        "ray_tls_link_sniffed",
        calls=ROUNDS * CONCURRENT,
        body_bytes=body,
        segments=len(segments),
        bytes_to_worker=sent,
        tls_handshake_records=len(handshakes),
        token_seen=captured.count(token.encode()),
    )
    # And nothing of what the calls carried is readable there.
    assert token.encode() not in captured
    assert b"Bearer" not in captured
    assert marker.encode() not in captured and marker.upper().encode() not in captured
