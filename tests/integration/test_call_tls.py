"""``chains call`` and ``chains ui`` on an entrypoint served over HTTPS with a certificate of a
private authority, as the ray target's proxy serves it: real chainlet servers on 127.0.0.1
serving TLS (a unary, a streamed and a WebSocket entrypoint), each recorded as a running chain
in a state folder of the test's own, and the real commands in subprocesses, with no
``SSL_CERT_FILE``. Without the authority the call is refused at the handshake, saying so and
naming ``--ca-file``; with ``--ca-file``, ``$CHAINS_CA_FILE`` or the authority recorded in the
chain's state (``entrypoint_ca``) it is answered."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from chains.loader import load_chain
from chains.targets.certificates import ChainAuthority
from chains.targets.state import (
    ChainletProcess,
    ChainState,
    Deployment,
    DeploymentChainlet,
    LocalRecord,
    process_identity,
)
from tests.helpers import dashboard, generate_chain, origin_of, wait_until, write_chain
from tests.integration.test_tls import TlsServer

CHAIN = """
from collections.abc import AsyncIterator

import chains


class Shout(chains.ChainletBase):
    async def run_remote(self, text: str) -> str:
        return text.upper()


class Count(chains.ChainletBase):
    async def run_remote(self, text: str, times: int) -> AsyncIterator[str]:
        for index in range(times):
            yield f"{text}-{index};"


class Talk(chains.ChainletBase):
    async def run_remote(self, websocket: chains.WebSocketProtocol) -> None:
        async for message in websocket:
            await websocket.send(f"heard {message}")
"""

# Each entrypoint, the arguments (or stdin lines) it is called with, and what `chains call` prints.
CALLS = {
    "Shout": (["--json", '{"text": "hello"}'], None, '"HELLO"\n'),
    "Count": (["--json", '{"text": "n", "times": 3}'], None, "n-0;n-1;n-2;\n"),
    "Talk": ([], "hi\nthere\n", "heard hi\nheard there\n"),
}


@dataclass(frozen=True)
class Served:
    chainlet: str
    kind: str  # the entrypoint's output kind, as the state records it
    server: TlsServer


@dataclass(frozen=True)
class Setup:
    folder: Path
    ca: Path  # the authority that issued the servers' certificate
    other_ca: Path  # another one
    served: dict[str, Served]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    folder = tmp_path_factory.mktemp("call-tls")
    file = write_chain(folder / "src", CHAIN)
    authority = ChainAuthority.load_or_create("call-tls", folder / "ca")
    ChainAuthority.load_or_create("other", folder / "other")
    issued = authority.issue(["localhost", "127.0.0.1"])
    (folder / "server.pem").write_bytes(issued.cert_pem)
    (folder / "server-key.pem").write_bytes(issued.key_pem)
    (folder / "server-key.pem").chmod(0o600)
    env = {
        "CHAINS_TLS_CERT_FILE": str(folder / "server.pem"),
        "CHAINS_TLS_KEY_FILE": str(folder / "server-key.pem"),
    }
    served = {}
    for name in CALLS:
        directory = generate_chain(file, folder / "out" / name, entrypoint=name)[name]
        kind = load_chain(file, name).entrypoint.endpoint.output_kind.name
        # Each entrypoint keeps its own async calls, as a pushed chain does (`chains jobs`).
        serving = {**env, "CHAINS_JOBS_STORE": str(folder / f"jobs-{name}.sqlite")}
        served[name] = Served(
            name, kind, TlsServer(directory, folder / "ca" / "ca.pem", entrypoint=True, env=serving)
        )
    try:
        for one in served.values():
            one.server.start()
        for one in served.values():
            one.server.wait_ready()
        yield Setup(folder, folder / "ca" / "ca.pem", folder / "other" / "ca.pem", served)
    finally:
        for one in served.values():
            one.server.kill()


def _record(home: Path, chain: str, served: Served, entrypoint_ca: Path | None) -> None:
    """Record ``served`` as the running chain ``chain``, its server standing for the supervisor,
    as a push writes it: the state (with the entrypoint's authority, if given) and the deployment."""
    pid = served.server.process.pid if served.server.process else None
    folder = home / chain / "deployments" / "d1"
    folder.mkdir(parents=True, exist_ok=True)
    deployment = Deployment(
        chain=chain,
        id="d1",
        source="",
        entrypoint=served.chainlet,
        entrypoint_kind=served.kind,
        chainlets=[
            DeploymentChainlet(
                name=served.chainlet, directory=str(served.server.directory), is_entrypoint=True
            )
        ],
        python=sys.executable,
    )
    (folder / "deployment.json").write_text(deployment.model_dump_json())
    state = ChainState(
        chain=chain,
        deployment="d1",
        entrypoint=served.chainlet,
        entrypoint_kind=served.kind,
        entrypoint_url=served.server.url,
        entrypoint_ca=str(entrypoint_ca) if entrypoint_ca is not None else None,
        local=LocalRecord(supervisor_pid=pid or 0, supervisor_identity=process_identity(pid)),
        processes=[
            ChainletProcess(
                chainlet=served.chainlet,
                replica=0,
                port=served.server.port,
                url=served.server.url,
                pid=pid,
                state="ready",
            )
        ],
    )
    tmp = folder / "state.json.tmp"
    tmp.write_text(state.model_dump_json())
    tmp.replace(folder / "state.json")  # a dashboard polling it reads the old state or the new
    link = home / chain / "state.json"
    if not link.is_symlink():
        link.symlink_to(Path("deployments") / "d1" / "state.json")


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "CHAINS_HOME": str(home), **extra}
    env.pop("SSL_CERT_FILE", None)  # the system's authorities only, as on a user's machine
    return env


def _call(
    home: Path, chain: str, *args: str, stdin: str | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chains", "call", chain, *args],
        input=stdin or "",
        capture_output=True,
        text=True,
        env=_env(home, **env),
        timeout=60,
    )


@pytest.mark.parametrize("chainlet", list(CALLS))
def test_a_call_without_the_authority_is_refused_naming_the_certificate_and_ca_file(
    setup: Setup, tmp_path: Path, chainlet: str
) -> None:
    served = setup.served[chainlet]
    _record(tmp_path, "tls", served, entrypoint_ca=None)
    args, stdin, _ = CALLS[chainlet]
    result = _call(tmp_path, "tls", *args, stdin=stdin)
    assert result.returncode == 1, result
    port = served.server.port
    assert (
        f"the certificate of {'wss' if chainlet == 'Talk' else 'https'}://localhost:{port}" in result.stderr
    )
    assert "is not trusted (unable to get local issuer certificate)" in result.stderr
    assert "--ca-file PATH" in result.stderr and "CHAINS_CA_FILE" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


@pytest.mark.parametrize("chainlet", list(CALLS))
def test_a_call_with_ca_file_is_answered(setup: Setup, tmp_path: Path, chainlet: str) -> None:
    _record(tmp_path, "tls", setup.served[chainlet], entrypoint_ca=None)
    args, stdin, printed = CALLS[chainlet]
    result = _call(tmp_path, "tls", *args, "--ca-file", str(setup.ca), stdin=stdin)
    assert result.returncode == 0, result.stderr
    assert result.stdout == printed


@pytest.mark.parametrize("chainlet", list(CALLS))
def test_a_call_trusts_the_authority_recorded_in_the_chains_state(
    setup: Setup, tmp_path: Path, chainlet: str
) -> None:
    _record(tmp_path, "tls", setup.served[chainlet], entrypoint_ca=setup.ca)
    args, stdin, printed = CALLS[chainlet]
    result = _call(tmp_path, "tls", *args, stdin=stdin)
    assert result.returncode == 0, result.stderr
    assert result.stdout == printed


def test_the_ca_file_variable_is_the_option(setup: Setup, tmp_path: Path) -> None:
    _record(tmp_path, "tls", setup.served["Shout"], entrypoint_ca=None)
    result = _call(tmp_path, "tls", *CALLS["Shout"][0], CHAINS_CA_FILE=str(setup.ca))
    assert result.returncode == 0, result.stderr
    assert result.stdout == '"HELLO"\n'


def test_ca_file_of_another_authority_overrides_the_recorded_one_and_is_refused(
    setup: Setup, tmp_path: Path
) -> None:
    _record(tmp_path, "tls", setup.served["Count"], entrypoint_ca=setup.ca)
    result = _call(tmp_path, "tls", *CALLS["Count"][0], "--ca-file", str(setup.other_ca))
    assert result.returncode == 1, result
    assert "is not trusted" in result.stderr
    assert f"--ca-file {setup.other_ca} did not issue it" in result.stderr
    assert result.stdout == ""


def test_a_recorded_authority_that_did_not_issue_the_certificate_is_named(
    setup: Setup, tmp_path: Path
) -> None:
    _record(tmp_path, "tls", setup.served["Shout"], entrypoint_ca=setup.other_ca)
    result = _call(tmp_path, "tls", *CALLS["Shout"][0])
    assert result.returncode == 1, result
    assert f"the authority the chain was pushed with ({setup.other_ca}) did not issue it" in result.stderr
    assert "--ca-file PATH" in result.stderr


def test_a_ca_file_that_is_missing_or_not_pem_is_refused_before_calling(setup: Setup, tmp_path: Path) -> None:
    _record(tmp_path, "tls", setup.served["Shout"], entrypoint_ca=None)
    missing = tmp_path / "missing.pem"
    result = _call(tmp_path, "tls", *CALLS["Shout"][0], "--ca-file", str(missing))
    assert result.returncode == 1
    assert f"--ca-file={str(missing)!r} cannot be read (No such file or directory)" in result.stderr
    garbage = tmp_path / "key.pem"
    garbage.write_bytes((setup.folder / "server-key.pem").read_bytes())  # a key, no certificate
    result = _call(tmp_path, "tls", *CALLS["Shout"][0], "--ca-file", str(garbage))
    assert result.returncode == 1
    assert f"--ca-file={str(garbage)!r} holds no certificate authority" in result.stderr
    assert "Traceback" not in result.stderr


def _jobs(home: Path, chain: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chains", "jobs", chain, *args],
        capture_output=True,
        text=True,
        env=_env(home, **env),
        timeout=60,
    )


def test_chains_jobs_without_the_authority_is_refused_naming_the_certificate_and_ca_file(
    setup: Setup, tmp_path: Path
) -> None:
    served = setup.served["Shout"]
    _record(tmp_path, "tls", served, entrypoint_ca=None)
    result = _jobs(tmp_path, "tls")
    assert result.returncode == 1, result
    assert f"the certificate of https://localhost:{served.server.port} is not trusted" in result.stderr
    assert "--ca-file PATH" in result.stderr and "CHAINS_CA_FILE" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    submitted = _call(tmp_path, "tls", "--async", *CALLS["Shout"][0])  # `call --async` alike
    assert submitted.returncode == 1 and "is not trusted" in submitted.stderr, submitted
    assert "Traceback" not in submitted.stderr


def test_chains_jobs_with_ca_file_fetches_lists_and_cancels_a_job(setup: Setup, tmp_path: Path) -> None:
    _record(tmp_path, "tls", setup.served["Shout"], entrypoint_ca=None)
    ca = str(setup.ca)
    submitted = _call(tmp_path, "tls", "--async", *CALLS["Shout"][0], "--ca-file", ca)
    assert submitted.returncode == 0, submitted.stderr
    request_id = submitted.stdout.strip()
    output = _jobs(tmp_path, "tls", request_id, "--wait", "30", "--output", "--ca-file", ca)
    assert output.returncode == 0, output.stderr
    assert output.stdout == '"HELLO"\n'
    listed = _jobs(tmp_path, "tls", "--ca-file", ca)
    assert listed.returncode == 0 and request_id in listed.stdout and "SUCCEEDED" in listed.stdout
    canceled = _jobs(tmp_path, "tls", request_id, "--cancel", CHAINS_CA_FILE=ca)  # the variable too
    assert canceled.returncode == 0 and "the request already ended: SUCCEEDED" in canceled.stdout


def test_chains_jobs_trusts_the_recorded_authority_and_ca_file_overrides_it(
    setup: Setup, tmp_path: Path
) -> None:
    _record(tmp_path, "tls", setup.served["Shout"], entrypoint_ca=setup.ca)
    assert _jobs(tmp_path, "tls").returncode == 0
    refused = _jobs(tmp_path, "tls", "--ca-file", str(setup.other_ca))
    assert refused.returncode == 1 and f"--ca-file {setup.other_ca} did not issue it" in refused.stderr
    missing = tmp_path / "missing.pem"
    unreadable = _jobs(tmp_path, "tls", "--ca-file", str(missing))
    assert unreadable.returncode == 1 and "cannot be read" in unreadable.stderr
    assert "Traceback" not in unreadable.stderr + refused.stderr


def test_the_dashboard_relays_to_the_entrypoint_with_the_recorded_authority(
    setup: Setup, tmp_path: Path
) -> None:
    served = setup.served["Shout"]
    _record(tmp_path, "tls", served, entrypoint_ca=None)
    with dashboard("tls", _env(tmp_path)) as printed:
        url = origin_of(printed)
        # Without the authority: the relay says the entrypoint's certificate was refused.
        refused = httpx.get(f"{url}/api/openapi", timeout=10)
        assert refused.status_code == 502
        assert "CERTIFICATE_VERIFY_FAILED" in refused.json()["detail"]
        # A push that records the authority: the dashboard's next poll reads the new state.
        _record(tmp_path, "tls", served, entrypoint_ca=setup.ca)
        wait_until(
            lambda: httpx.get(f"{url}/api/openapi", timeout=10).status_code == 200,
            20,
            "the dashboard to reach the entrypoint with the recorded authority",
            poll=0.2,
        )
        assert "/run_remote" in httpx.get(f"{url}/api/openapi", timeout=10).json()["paths"]
        answer = httpx.post(f"{url}/api/call", json={"text": "relayed"}, timeout=10)
        assert answer.status_code == 200, answer.text
        assert answer.json() == "RELAYED"


def test_a_state_written_before_entrypoint_ca_is_read_without_one() -> None:
    earlier = (
        '{"chain": "old", "deployment": "d1", "entrypoint": "E", "entrypoint_url": "http://127.0.0.1:1", '
        '"processes": []}'
    )
    state = ChainState.model_validate_json(earlier)
    assert state.entrypoint_ca is None and state.entrypoint_context() is None
