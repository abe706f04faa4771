"""``chains push --target swarm`` on a real two-node swarm: a chain of three chainlets whose
middle one (and last one) has a replica on each node, compared with the local target; what
crosses the wire between the nodes; node 2's dockerd stopped under load; a rolling re-push.

The tests run in order on one push of the chain (each build and push costs CI time): the
last ones re-push and stop it."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import dashboard, origin_of, tcpdump_listening, unique_port, wait_until, write_chain
from tests.swarm.conftest import Cli, Swarm, remove_stack, service_tasks

THREE = '''
    """Entry -> Mid (two replicas) -> Leaf (two replicas); Leaf fails on "fail", and reads a secret.

    Leaf has two replicas too, so that stopping either node leaves one of each chainlet.
    """

    from collections.abc import AsyncIterator

    import pydantic

    import chains


    class Echo(pydantic.BaseModel):
        text: str
        secret_ok: bool = False


    class Leaf(chains.ChainletBase):
        remote_config = chains.RemoteConfig(
            assets=chains.Assets(secret_keys=["leaf_key"]),
            compute=chains.Compute(replicas=2, cpu_count=0.5, memory="300Mi"),
        )

        def __init__(self, context: chains.DeploymentContext = chains.depends_context()) -> None:
            self._key = context.secrets["leaf_key"]

        async def run_remote(self, text: str) -> AsyncIterator[Echo]:
            if text == "fail":
                raise ValueError(f"leaf refuses {text!r}")
            print(f"leaf splits {text!r}", flush=True)
            for word in text.split():
                yield Echo(text=word, secret_ok=self._key == "s3cret")


    class Mid(chains.ChainletBase):
        remote_config = chains.RemoteConfig(
            compute=chains.Compute(replicas=2, cpu_count=0.5, memory="300Mi")
        )

        def __init__(self, leaf: Leaf = chains.depends(Leaf, retries=4, timeout_sec=10)) -> None:
            self._leaf = leaf

        async def run_remote(self, text: str) -> list[Echo]:
            words = [echo async for echo in self._leaf.run_remote(text)]
            return [Echo(text=str(len(words))), *words]


    @chains.mark_entrypoint("sw-three")
    class Entry(chains.ChainletBase):
        # Outside callers of a deployed chain get no tracebacks unless asked: a test reads them.
        remote_config = chains.RemoteConfig(
            options=chains.ChainletOptions(env_variables={"CHAINS_DEBUG_ERRORS": "1"})
        )

        def __init__(self, mid: Mid = chains.depends(Mid, retries=4, timeout_sec=20)) -> None:
            self._mid = mid

        async def run_remote(self, text: str, calls: int = 1) -> AsyncIterator[Echo]:
            for _ in range(calls):
                for echo in await self._mid.run_remote(text):
                    yield echo
            yield Echo(text="done")
'''

CALLS: list[tuple[str, dict[str, Any], dict[str, str]]] = [
    ("ndjson", {"text": "a b c", "calls": 2}, {}),
    ("sse", {"text": "x y", "calls": 1}, {"accept": "text/event-stream"}),
]


def _outputs(url: str) -> dict[str, Any]:
    """Every form of the chain's answers: raw typed items, SSE, and the remote error."""
    found: dict[str, Any] = {}
    for name, body, headers in CALLS:
        answer = httpx.post(f"{url}/run_remote", json=body, headers=headers, timeout=60)
        found[name] = (answer.status_code, answer.headers["content-type"], answer.text)
    error = httpx.post(f"{url}/run_remote", json={"text": "fail"}, timeout=60)
    found["error"] = (error.status_code, _error_shape(error.json()["error"]))
    return found


def _error_shape(error: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Each hop of a remote error: chainlet, type and message (tracebacks differ in paths)."""
    hops = []
    while error:
        hops.append((error["chainlet"], error["exc_type"], error["message"]))
        error = error.get("cause") or {}
    return hops


@pytest.fixture(scope="module")
def three(
    swarm: Swarm, tmp_path_factory: pytest.TempPathFactory, cache_dir: Path
) -> Iterator[dict[str, Any]]:
    """The chain pushed once, on the local target first (the reference) and then on the swarm;
    the tests below run in order: the last ones re-push and stop it."""
    remove_stack(swarm, "sw-three")
    folder = tmp_path_factory.mktemp("three")
    file = write_chain(folder / "chain", THREE)
    local = Cli(swarm, folder / "local-home", cache_dir, target="local")
    pushed_local = local.push(str(file), "--secret", "leaf_key=s3cret")
    try:
        reference = _outputs(pushed_local["entrypoint_url"])
    finally:
        local.run("stop", "sw-three")
    cli = Cli(swarm, folder / "home", cache_dir)
    pushed, progress = cli.push_reporting(
        str(file), "--secret", "leaf_key=s3cret", "--timeout", "180", "--port", str(unique_port())
    )
    yield {"cli": cli, "file": file, "pushed": pushed, "progress": progress, "reference": reference}
    cli.run("stop", "sw-three", check=False)
    remove_stack(swarm, "sw-three")


def test_the_middle_chainlets_replicas_run_on_both_nodes(swarm: Swarm, three: dict[str, Any]) -> None:
    nodes = swarm.node_ids()
    tasks = service_tasks(swarm, "sw-three_sw-three-mid")
    assert [t["State"] for t in tasks] == ["running", "running"], tasks
    assert {t["NodeID"] for t in tasks} == set(nodes)  # one on each node
    # Each node's engine runs a Mid container of its own, from the image the push loaded there.
    for host in nodes.values():
        names = swarm.docker(
            "ps",
            "--filter",
            "label=com.docker.swarm.service.name=sw-three_sw-three-mid",
            "--format",
            "{{.Names}}",
            host=host,
        ).split()
        assert len(names) == 1, (host, names)
    status = three["cli"].run("status", "sw-three").stdout
    assert status.count("ready") == 5 and "Mid[1]" in status, status


def test_calls_and_streams_match_the_local_target(three: dict[str, Any]) -> None:
    found = _outputs(three["pushed"]["entrypoint_url"])
    assert found == three["reference"]
    lines = [json.loads(line) for line in found["ndjson"][2].splitlines()]
    assert [e["text"] for e in lines] == ["3", "a", "b", "c", "3", "a", "b", "c", "done"]
    assert all(e["secret_ok"] for e in lines if e["text"] in "abc")  # Leaf read its swarm secret


def test_a_remote_error_carries_every_hops_traceback(three: dict[str, Any]) -> None:
    answer = httpx.post(f"{three['pushed']['entrypoint_url']}/run_remote", json={"text": "fail"}, timeout=60)
    assert answer.status_code == 500
    error = answer.json()["error"]
    hops = []
    while error:
        hops.append(error)
        error = error.get("cause") or {}
    assert [h["chainlet"] for h in hops] == ["Entry", "Mid", "Leaf"]
    assert "leaf refuses 'fail'" in hops[-1]["message"]
    for hop in hops:
        assert "Traceback" in hop["traceback"] or "run_remote" in hop["traceback"], hop


def test_credentials_are_swarm_secrets_never_in_the_stack(swarm: Swarm, three: dict[str, Any]) -> None:
    home: Path = three["cli"].home
    stack_files = list(home.glob("sw-three/deployments/*/stack.json"))
    assert len(stack_files) == 1
    text = stack_files[0].read_text()
    specs = swarm.docker("service", "inspect", *[f"sw-three_sw-three-{n}" for n in ("entry", "mid", "leaf")])
    token = swarm.docker(
        "exec", _container(swarm, "sw-three_sw-three-leaf"), "cat", "/run/secrets/CHAINS_INTERNAL_TOKEN"
    )
    assert len(token) >= 32
    for where in (text, specs):
        assert "s3cret" not in where and token not in where
        assert "CHAINS_INTERNAL_TOKEN" in where  # named, as the file each task reads
    document = json.loads(text)
    network = document["networks"]["chain"]
    assert network["driver"] == "overlay"
    for service in document["services"].values():
        assert service["deploy"]["endpoint_mode"] == "dnsrr"
        assert "healthcheck" in service
        assert service["deploy"]["update_config"]["order"] in ("start-first", "stop-first")


def _container(swarm: Swarm, service: str) -> str:
    """A running container of ``service`` on node 1 (the manager), by name."""
    label = f"label=com.docker.swarm.service.name={service}"
    names = swarm.docker("ps", "--filter", label, "--format", "{{.Names}}").split()
    assert names, f"no container of {service} on node 1"
    return names[0]


def test_call_and_logs(three: dict[str, Any]) -> None:
    cli: Cli = three["cli"]
    out = cli.run("call", "sw-three", "--json", '{"text": "followed words"}').stdout
    assert '"followed"' in out and '"done"' in out
    deadline = time.monotonic() + 30
    logs = ""
    while time.monotonic() < deadline:  # service logs reach the manager within a moment
        logs = cli.run("logs", "sw-three", "Leaf").stdout
        if "leaf splits 'followed words'" in logs:
            break
        time.sleep(0.5)
    assert "leaf splits 'followed words'" in logs
    every = cli.run("logs", "sw-three").stdout
    assert "Mid | " in every and "Leaf | " in every


def test_async_calls_are_off_without_a_shared_store_and_say_how_to_turn_them_on(
    three: dict[str, Any],
) -> None:
    # A SQLite file on one node's disk would not be the other node's: no job store, said once.
    note = "async calls (POST /async_run_remote) are off on target swarm"
    assert three["progress"].count(note) == 1, three["progress"]
    answer = httpx.post(f"{three['pushed']['entrypoint_url']}/async_run_remote", json={"model_input": {}})
    assert answer.status_code == 404 and "CHAINS_JOBS_STORE=postgresql://" in answer.json()["detail"]


def test_the_dashboard_shows_a_swarm_chain(three: dict[str, Any]) -> None:
    cli: Cli = three["cli"]
    with dashboard("sw-three", cli.env) as url:
        origin = origin_of(url)
        overview = httpx.get(f"{origin}/api/overview", timeout=30).json()
        assert overview["target"] == "swarm"
        assert {node["name"] for node in overview["chainlets"]} == {"Entry", "Mid", "Leaf"}
        leaf = httpx.get(f"{origin}/api/logs", params={"chainlet": "Leaf", "lines": "200"}, timeout=30)
        assert leaf.status_code == 200, leaf.text
        said = "leaf splits 'followed words'"  # the call of the test above
        assert any(said in text for text in leaf.json()["lines"])


# -- between the nodes ----------------------------------------------------------------------------

CAPTURE_SEC = 20
CAPTURE_PACKETS = 400
BATCHES = 10
CONCURRENT = 16


def _expected(text: str) -> list[str]:
    return [str(len(text.split())), *text.split(), "done"]


def _texts(answer: httpx.Response) -> list[str]:
    assert answer.status_code == 200, answer.text
    return [json.loads(line)["text"] for line in answer.text.splitlines()]


def _sniff(swarm: Swarm, url: str, pcap: Path) -> bytes:
    """The overlay's packets on the link between the nodes (VXLAN, or ESP when encrypted),
    captured while calls go from Entry (node 1) to Mid (a replica on each node)."""
    if shutil.which("tcpdump") is None:
        pytest.fail("tcpdump is missing: apt-get install tcpdump", pytrace=False)
    filter_ = "udp port 4789 or esp"
    sniffer = subprocess.Popen(
        ["tcpdump", "-i", swarm.link, "-U", "-s", "0", "-c", str(CAPTURE_PACKETS), "-w", str(pcap), filter_],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )

    async def calls() -> None:
        # Concurrent calls make Entry open several connections to Mid, each to an address the
        # swarm's DNS picked: some go to node 2 (one connection alone keeps to one replica).
        deadline = time.monotonic() + CAPTURE_SEC
        async with httpx.AsyncClient(timeout=30) as client:
            for batch in range(BATCHES):
                if time.monotonic() > deadline or sniffer.poll() is not None:
                    return
                texts = [f"w{batch} x{i}" for i in range(CONCURRENT)]
                answers = await asyncio.gather(
                    *(client.post(f"{url}/run_remote", json={"text": text}) for text in texts)
                )
                assert [_texts(a) for a in answers] == [_expected(t) for t in texts]

    try:
        tcpdump_listening(sniffer)
        asyncio.run(calls())
    finally:
        if sniffer.poll() is None:
            sniffer.terminate()
        sniffer.wait(10)
    return pcap.read_bytes()


def _inner_tcp(pcap: bytes) -> list[tuple[int, int, bytes]]:
    """(source port, destination port, payload) of every TCP segment the captured VXLAN
    packets carry between containers (IPv4 in Ethernet in VXLAN in UDP, in Ethernet)."""
    segments = []
    offset = 24  # the pcap file header
    while offset + 16 <= len(pcap):
        length = int.from_bytes(pcap[offset + 8 : offset + 12], "little")
        frame = pcap[offset + 16 : offset + 16 + length]
        offset += 16 + length
        at = 14  # outer Ethernet
        if frame[12:14] != b"\x08\x00" or frame[at + 9] != 17:
            continue  # not IPv4/UDP (ESP, ARP)
        at += (frame[at] & 0x0F) * 4 + 8 + 8 + 14  # IP, UDP, VXLAN, inner Ethernet
        if len(frame) < at + 20 or frame[at - 2 : at] != b"\x08\x00" or frame[at + 9] != 6:
            continue  # the inner packet is no IPv4/TCP
        at += (frame[at] & 0x0F) * 4
        ports = int.from_bytes(frame[at : at + 2], "big"), int.from_bytes(frame[at + 2 : at + 4], "big")
        segments.append((*ports, frame[at + (frame[at + 12] >> 4) * 4 :]))
    return segments


TLS_RECORD_STARTS = (b"\x16\x03\x01", b"\x16\x03\x03", b"\x17\x03\x03")  # handshake, app data


def test_tls_between_chainlets_hides_the_token_on_the_link(
    swarm: Swarm, three: dict[str, Any], tmp_path: Path
) -> None:
    """The overlay is not encrypted here (this kernel has no AES-GCM IPsec), so the chainlets
    call each other over TLS, the target's default: what crosses the link between the nodes
    is TLS records, never a request in clear, nor the chain's token. The control: the inner
    TCP segments to the chainlets' port were captured and read (so a request in clear would
    have been seen), and they are TLS handshakes and application data."""
    if swarm.ipsec:
        pytest.skip("the overlay is encrypted here: its packets show nothing of what they carry (see below)")
    captured = _sniff(swarm, three["pushed"]["entrypoint_url"], tmp_path / "tls.pcap")
    to_chainlets = [payload for _, port, payload in _inner_tcp(captured) if port == 8000 and payload]
    assert len(to_chainlets) >= 10, f"only {len(to_chainlets)} segments to the chainlets' port were captured"
    records = [p for p in to_chainlets if p.startswith(TLS_RECORD_STARTS)]
    assert len(records) >= 10, [p[:16] for p in to_chainlets[:10]]
    assert not [p[:40] for p in to_chainlets if p.startswith((b"POST ", b"GET "))]
    assert _token(swarm) not in captured
    assert b"/run_remote" not in captured and b"Bearer" not in captured


def test_an_encrypted_overlay_hides_the_token_on_the_link(
    swarm: Swarm, three: dict[str, Any], tmp_path: Path
) -> None:
    if not swarm.ipsec:
        pytest.skip(
            "this kernel cannot do IPsec ESP with AES-GCM (rfc4106(gcm(aes))), which an encrypted overlay "
            "network needs: the swarm would drop its traffic between nodes"
        )
    captured = _sniff(swarm, three["pushed"]["entrypoint_url"], tmp_path / "encrypted.pcap")
    assert len(captured) > 10_000  # packets were captured: ESP
    assert _token(swarm) not in captured


def _token(swarm: Swarm) -> bytes:
    token = swarm.docker(
        "exec", _container(swarm, "sw-three_sw-three-entry"), "cat", "/run/secrets/CHAINS_INTERNAL_TOKEN"
    ).encode()
    assert len(token) >= 32
    return token


# -- node 2 fails under load ---------------------------------------------------------------------

CALLERS = 16
MAX_SECONDS = 150.0  # the callers stop by then whatever happens
ROUND_CALLS = 2 * 16  # calls before node 2 stops, and again once the replicas are back
ROUND_LIMIT_SEC = 60.0


def _running_on(swarm: Swarm, service: str) -> list[str]:
    return sorted(t["NodeID"] for t in service_tasks(swarm, service) if t["State"] == "running")


def test_stopping_node_2s_dockerd_under_load(
    swarm: Swarm, three: dict[str, Any], record_property: Any
) -> None:
    """SIGTERM to node 2's dockerd (by its PID) while 16 callers call without pause: the
    replicas there stop, the callers' stubs retry on the ones left on node 1, and the swarm
    starts the lost replicas on node 1 once it sees node 2 down."""
    url = three["pushed"]["entrypoint_url"]
    nodes = swarm.node_ids()
    node1 = next(i for i, host in nodes.items() if host == swarm.node1)
    services = ("sw-three_sw-three-mid", "sw-three_sw-three-leaf")
    for service in services:
        assert set(_running_on(swarm, service)) == set(nodes), service  # one replica per node

    failures: list[str] = []
    calls = [0]
    lock = threading.Lock()
    stop = threading.Event()

    def caller(index: int) -> None:
        with httpx.Client(timeout=60) as client:
            n = 0
            while not stop.is_set():
                n += 1
                text = f"c{index} n{n}"
                try:
                    answer = client.post(f"{url}/run_remote", json={"text": text})
                    ok = answer.status_code == 200 and _texts(answer) == _expected(text)
                    problem = "" if ok else f"{answer.status_code} {answer.text[:300]}"
                except (httpx.HTTPError, ValueError, KeyError) as exc:
                    problem = f"{type(exc).__name__}: {exc}"
                with lock:
                    calls[0] += 1
                    if problem:
                        failures.append(problem)

    threads = [threading.Thread(target=caller, args=(i,), daemon=True) for i in range(CALLERS)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    restored_at = None
    gone_after = None
    cli: Cli = three["cli"]
    try:
        wait_until(lambda: calls[0] >= ROUND_CALLS, ROUND_LIMIT_SEC, "the callers in full swing")
        stopped_at = time.monotonic()
        swarm.stop_node2()
        while time.monotonic() - started < MAX_SECONDS:
            on_node2 = _on_node2(cli) if gone_after is None else []
            if on_node2 and all(p["state"] == "gone" for p in on_node2):
                gone_after = time.monotonic() - stopped_at
            if all(_running_on(swarm, s) == [node1, node1] for s in services):
                restored_at = time.monotonic()
                break
            time.sleep(0.5)
        if restored_at is not None:
            floor = calls[0] + ROUND_CALLS
            wait_until(lambda: calls[0] >= floor, ROUND_LIMIT_SEC, "calls once the replicas are back")
    finally:
        stop.set()
        for thread in threads:
            thread.join(90)
        swarm.start_node2()
    assert not any(t.is_alive() for t in threads)
    figures = {
        "callers": CALLERS,
        "calls": calls[0],
        "failed": len(failures),
        "restored_after_s": None if restored_at is None else round(restored_at - stopped_at, 1),
        "status_gone_after_s": None if gone_after is None else round(gone_after, 1),
        "failures": sorted(set(failures))[:5],
    }
    record_property("node_stop", json.dumps(figures))
    print(f"node-2 stop under load: {json.dumps(figures)}")
    assert restored_at is not None, (
        f"the swarm did not run 2 replicas again within {MAX_SECONDS:.0f}s: {figures}"
    )
    assert calls[0] > CALLERS * 10, figures
    assert failures == [], figures
    # `chains status` read the tasks live: node 2's replicas were "gone" within the services'
    # health-check period (the manager alone lists them as running for longer), and the
    # replacements count as restarts of their slots.
    assert gone_after is not None and gone_after <= HEALTH_CHECK_PERIOD_SEC, figures
    state = cli.state("sw-three")
    moved = [p for p in state["processes"] if p["chainlet"] != "Entry" and p["restarts"] >= 1]
    assert len(moved) >= len(services), state["processes"]
    assert all(p["state"] == "ready" for p in state["processes"]), state["processes"]


HEALTH_CHECK_PERIOD_SEC = 2 * 3 + 3  # compose.py: a 2 s interval, 3 retries, a 3 s timeout


def _on_node2(cli: Cli) -> list[dict[str, Any]]:
    """The chain's replicas on node 2, as `chains status --json` shows them."""
    processes = cli.state("sw-three")["processes"]
    return [p for p in processes if p["container"] and p["container"]["name"].endswith(" on chains-node2")]


def test_status_names_services_and_their_https_urls(three: dict[str, Any]) -> None:
    """What status shows of a swarm chain: the internal chainlets at the https:// URL they
    serve (TLS between chainlets is on), in the swarm's words, not the local supervisor's."""
    cli: Cli = three["cli"]
    state = cli.state("sw-three")
    internal = [p for p in state["processes"] if p["chainlet"] != "Entry"]
    assert internal and all(p["url"].startswith("https://") for p in internal), internal
    shown = cli.run("status", "sw-three")
    assert "supervisor" not in shown.stdout + shown.stderr
    assert "https://sw-three-mid:8000" in shown.stdout


# -- re-push and stop ----------------------------------------------------------------------------


def test_repush_rolls_every_service_over_and_keeps_the_url(swarm: Swarm, three: dict[str, Any]) -> None:
    cli: Cli = three["cli"]
    file: Path = three["file"]
    before = {t["ID"] for t in service_tasks(swarm, "sw-three_sw-three-mid")}
    file.write_text(file.read_text().replace('Echo(text="done")', 'Echo(text="done again")'))
    pushed = cli.push(str(file), "--secret", "leaf_key=s3cret", "--timeout", "180")
    assert pushed["entrypoint_url"] == three["pushed"]["entrypoint_url"]
    after = service_tasks(swarm, "sw-three_sw-three-mid")
    assert not {t["ID"] for t in after} & before and len(after) == 2
    answer = httpx.post(f"{pushed['entrypoint_url']}/run_remote", json={"text": "again"}, timeout=60)
    assert answer.status_code == 200 and '"done again"' in answer.text


def test_stop_removes_services_network_and_secrets(swarm: Swarm, three: dict[str, Any]) -> None:
    cli: Cli = three["cli"]
    assert "stopped chain 'sw-three' (3 service(s))" in cli.run("stop", "sw-three").stdout
    assert swarm.docker("service", "ls", "-q", "--filter", "label=com.docker.stack.namespace=sw-three") == ""
    assert swarm.docker("network", "ls", "-q", "--filter", "label=com.docker.stack.namespace=sw-three") == ""
    assert swarm.docker("secret", "ls", "-q", "--filter", "label=chains.chain=sw-three") == ""
