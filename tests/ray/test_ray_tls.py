"""TLS on the link between the nodes: calls that carry the chain's token cross between the
head and the worker only encrypted, both ways.

- head -> worker: Serve's proxy, on the head, hands a call to a replica on the worker inside
  Ray's encrypted gRPC (the cluster runs with ``RAY_USE_TLS=1`` and certificates made by
  chains, ``tests/ray/cluster.py``);
- worker -> head: a chainlet replica on the worker calls its dependency through Serve's
  proxy, with the chain's token, over HTTPS (the proxy serves the head's certificate of the
  cluster's authority; the ray target gives the chainlets that authority to trust).

Both nodes are on this machine's loopback. The proxy reaches the worker's replicas at the
worker's node address (127.0.0.3), so that leg is the traffic to and from that address. A
connection's other end is 127.0.0.1 (the kernel's source address on loopback), so a worker
replica's call to the proxy (127.0.0.2) cannot be told by its address: it is told by its
source port, one of the sockets that the worker's replica process holds to the proxy.
"""

from __future__ import annotations

import asyncio
import json
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

from chains.targets.certificates import ChainAuthority
from chains.targets.ray import replicas
from tests.helpers import tcpdump_listening
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


def _ports_to(pid: int, host: str, port: int) -> set[int]:
    """The local ports of the TCP connections that process ``pid`` (one the test's cluster
    started) holds to ``host:port``, from its file descriptors and the kernel's socket table."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink().name
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    wanted = f"{bytes(reversed([int(part) for part in host.split('.')])).hex().upper()}:{port:04X}"
    found = set()
    for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[2] == wanted and fields[9] in inodes:
            found.add(int(fields[1].split(":")[1], 16))
    return found


@dataclass(frozen=True)
class Segment:
    source: str
    destination: str
    source_port: int
    destination_port: int
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
            found.append(
                Segment(
                    ".".join(map(str, ip[12:16])),
                    ".".join(map(str, ip[16:20])),
                    int.from_bytes(tcp[0:2], "big"),
                    int.from_bytes(tcp[2:4], "big"),
                    payload,
                )
            )
    return found


def _capture(pcap: Path, proxy_port: int, during: Callable[[], None]) -> bytes:
    """Loopback traffic to and from the worker's address, and to and from the proxy's
    port, while ``during`` runs."""
    tcpdump = shutil.which("tcpdump")
    if tcpdump is None:
        pytest.fail("tcpdump is missing: apt-get install tcpdump", pytrace=False)
    link = f"tcp and (host {WORKER_IP} or (host {HEAD_IP} and port {proxy_port}))"
    sniffer = subprocess.Popen(
        [tcpdump, "-i", "lo", "-U", "-s", "0", "-w", str(pcap), link],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        tcpdump_listening(sniffer)
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


def test_the_chains_token_crosses_between_the_nodes_only_inside_tls(
    cli: Cli, ray_cluster: RayCluster, tmp_path: Path
) -> None:
    if ray_cluster.tls_env.get("RAY_USE_TLS") != "1":
        pytest.skip("the cluster runs without TLS (CHAINS_TEST_RAY_TLS=0)")
    assert ray_cluster.proxy_url.startswith("https://")
    pushed = cli.push(str(PAIR))
    info = _record(cli.home, "ray-pair")
    assert str(info["proxy_url"]).startswith("https://")
    # The push recorded the proxy's authority as the entrypoint's: its copy beside the code.
    recorded = Path(cli.state("ray-pair")["entrypoint_ca"])
    assert recorded.parent.name == "generated" and recorded.is_relative_to(cli.home)
    assert recorded.read_bytes() == Path(ray_cluster.tls_env["RAY_TLS_CA_CERT"]).read_bytes()
    found = replicas(str(info["dashboard_url"]), dict(info["apps"]))  # type: ignore[call-overload]
    # Each chainlet has a replica on each node, taking one call at a time: the proxy, on the
    # head, sends what its own node's replica has no room for across to the worker's.
    running = [r for r in found if r.state == "RUNNING"]
    for chainlet in ("Entry", "Upper"):
        assert {r.node_ip for r in running if r.chainlet == chainlet} == {HEAD_IP, WORKER_IP}, found
    (worker_entry,) = [r for r in running if r.chainlet == "Entry" and r.node_ip == WORKER_IP]
    assert worker_entry.pid, worker_entry
    token = _token(cli.home, "ray-pair")
    marker = f"sniffed-{secrets.token_hex(8)}"
    words = [marker] * WORDS_PER_CALL
    upper_url = f"{ray_cluster.proxy_url}/ray-pair/Upper/run_remote"
    entry_url = f"{pushed['entrypoint_url']}/run_remote"
    verify = ray_cluster.ssl_context() or True
    worker_ports: set[int] = set()

    async def concurrent_calls() -> None:
        headers = {"authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(timeout=60, verify=verify) as client:
            for _ in range(ROUNDS):
                # Upper, called as Entry calls it, with the chain's token, from here.
                answers = await asyncio.gather(
                    *(
                        client.post(upper_url, json={"words": words}, headers=headers)
                        for _ in range(CONCURRENT)
                    )
                )
                # Entry, whose replica on the worker calls Upper through the proxy on the head.
                answers += await asyncio.gather(
                    *(client.post(entry_url, json={"text": " ".join(words)}) for _ in range(CONCURRENT))
                )
                for answer in answers:
                    assert answer.status_code == 200, answer.text[:300]
                    assert answer.json() == [marker.upper()] * WORDS_PER_CALL

    def calls() -> None:
        asyncio.run(concurrent_calls())
        # While the stubs keep their connections to the proxy open (30 s).
        worker_ports.update(_ports_to(worker_entry.pid or 0, HEAD_IP, ray_cluster.serve_port))

    captured = _capture(tmp_path / "link.pcap", ray_cluster.serve_port, calls)
    segments = _segments(captured)
    body = len(marker) * WORDS_PER_CALL
    # The control, head -> worker: the sniffer saw the link, and the calls cross it, as TLS:
    # handshakes (the proxy's first call to a new replica), and application data to the worker
    # adding up to several calls' bodies (Ray's own traffic over the same seconds is far less).
    to_worker = [s for s in segments if s.destination == WORKER_IP]
    link = [s for s in segments if WORKER_IP in (s.source, s.destination)]
    handshakes = [s for s in link if s.payload.startswith(TLS_HANDSHAKE)]
    assert handshakes, f"{len(link)} segments captured on the link, no TLS handshake among them"
    sent = sum(len(s.payload) for s in to_worker)
    assert sent > 4 * body, f"only {sent} bytes went to the worker; one call's body is {body}"
    assert any(s.payload.startswith(TLS_APPLICATION_DATA) for s in to_worker)
    # Worker -> head: the worker's Entry called Upper through the proxy, its calls' bodies
    # crossed, and they crossed as TLS from the first byte.
    assert worker_ports, f"the worker's Entry (pid {worker_entry.pid}) holds no connection to the proxy"
    leg = [
        s for s in segments if s.destination_port == ray_cluster.serve_port and s.source_port in worker_ports
    ]
    leg_bytes = sum(len(s.payload) for s in leg)
    assert leg_bytes > body, f"only {leg_bytes} bytes went from the worker's Entry to the proxy"
    assert leg[0].payload.startswith(TLS_HANDSHAKE), leg[0].payload[:40]
    assert any(s.payload.startswith(TLS_APPLICATION_DATA) for s in leg)
    record(
        "ray_tls_link_sniffed",
        calls=2 * ROUNDS * CONCURRENT,
        body_bytes=body,
        segments=len(segments),
        bytes_to_worker=sent,
        bytes_worker_chainlet_to_proxy=leg_bytes,
        worker_chainlet_connections=len(worker_ports),
        tls_handshake_records=len(handshakes),
        token_seen=captured.count(token.encode()),
    )
    # And nothing of what the calls carried is readable there, either way.
    assert token.encode() not in captured
    assert b"Bearer" not in captured
    assert marker.encode() not in captured and marker.upper().encode() not in captured
    # `chains call` verifies the proxy with the authority the push recorded, with no
    # SSL_CERT_FILE; another authority given with --ca-file is refused, naming the certificate.
    assert "SSL_CERT_FILE" not in ray_cluster.env
    cli.env.pop("SSL_CERT_FILE", None)  # not even the system's bundle, which a machine may name
    called = cli.run("call", "ray-pair", "--json", '{"text": "over https"}')
    assert json.loads(called.stdout) == ["OVER", "HTTPS"]
    ChainAuthority.load_or_create("other", tmp_path / "other")
    other = tmp_path / "other" / "ca.pem"
    refused = cli.run("call", "ray-pair", "--json", '{"text": "x"}', "--ca-file", str(other), check=False)
    assert refused.returncode == 1
    assert f"the certificate of {pushed['entrypoint_url']} is not trusted" in refused.stderr
    assert f"--ca-file {other} did not issue it" in refused.stderr
