"""TLS between real chainlet processes on 127.0.0.1, as the swarm target sets it up: the callee
serves HTTPS with a certificate of its chain's CA, and the caller's stubs (async: aiohttp;
sync: httpx) trust that CA only. A caller given another chain's CA is refused during the
handshake: the callee never sees the request, nor the token it carries."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from chains.errors import DependencyUnavailable
from chains.stubs import StubBase, StubOptions
from chains.targets.certificates import ChainAuthority
from chains.tls import client_context
from tests.helpers import TOKEN, ServerProcess, generate_chain, wait_until, write_chain

CHAIN = """
import chains


class Leaf(chains.ChainletBase):
    async def run_remote(self, text: str) -> str:
        print(f"leaf got {text!r}", flush=True)
        return text[::-1]


class AsyncEntry(chains.ChainletBase):
    def __init__(self, leaf: Leaf = chains.depends(Leaf, retries=1, timeout_sec=5)) -> None:
        self._leaf = leaf

    async def run_remote(self, text: str) -> str:
        return await self._leaf.run_remote(text)


class SyncLeaf(chains.ChainletBase):
    def run_remote(self, text: str) -> str:
        print(f"leaf got {text!r}", flush=True)
        return text[::-1]


class SyncEntry(chains.ChainletBase):
    def __init__(self, leaf: SyncLeaf = chains.depends(SyncLeaf, retries=1, timeout_sec=5)) -> None:
        self._leaf = leaf

    def run_remote(self, text: str) -> str:
        return self._leaf.run_remote(text)
"""


class TlsServer(ServerProcess):
    """A chainlet server serving HTTPS; ready once it answers /readyz over TLS."""

    def __init__(self, directory: Path, ca: Path, **kwargs: object) -> None:
        super().__init__(directory, **kwargs)  # type: ignore[arg-type]
        self.url = f"https://localhost:{self.port}"
        self.ca = ca

    def wait_ready(self, timeout: float = 20.0) -> TlsServer:
        def ready() -> bool:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"server exited with {self.process.returncode}:\n{self.logs()}")
            try:
                answer = httpx.get(self.url + "/readyz", verify=client_context(self.ca), timeout=1)
            except httpx.TransportError:
                return False
            return answer.status_code == 200

        wait_until(ready, timeout, f"{self.directory.name} to serve TLS")
        return self


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("tls")
    file = write_chain(folder / "src", CHAIN)
    dirs = generate_chain(file, folder / "out" / "async", entrypoint="AsyncEntry")
    dirs.update(generate_chain(file, folder / "out" / "sync", entrypoint="SyncEntry"))
    # Both leaves serve one certificate: the name they are called by is localhost.
    mine = ChainAuthority.load_or_create("mine", folder / "mine")
    ChainAuthority.load_or_create("other", folder / "other")
    issued = mine.issue(["localhost", "127.0.0.1"])
    (folder / "leaf.pem").write_bytes(issued.cert_pem)
    (folder / "leaf-key.pem").write_bytes(issued.key_pem)
    (folder / "leaf-key.pem").chmod(0o600)
    return {
        **dirs,
        "mine": folder / "mine" / "ca.pem",
        "other": folder / "other" / "ca.pem",
        "cert": folder / "leaf.pem",
        "key": folder / "leaf-key.pem",
    }


@pytest.fixture(scope="module")
def leaves(setup: dict[str, Path]) -> Iterator[dict[str, TlsServer]]:
    """Leaf (async, called through aiohttp) and SyncLeaf (through httpx), serving TLS."""
    env = {"CHAINS_TLS_CERT_FILE": str(setup["cert"]), "CHAINS_TLS_KEY_FILE": str(setup["key"])}
    servers = {name: TlsServer(setup[name], setup["mine"], env=env) for name in ("Leaf", "SyncLeaf")}
    try:
        for server in servers.values():
            server.start()
        for server in servers.values():
            server.wait_ready()
        yield servers
    finally:
        for server in servers.values():
            server.kill()


CALLERS = {"AsyncEntry": "Leaf", "SyncEntry": "SyncLeaf"}


def _entry(setup: dict[str, Path], name: str, leaf: TlsServer, ca: str) -> ServerProcess:
    return ServerProcess(
        setup[name],
        entrypoint=True,
        dependencies={CALLERS[name]: [leaf.url]},
        env={"CHAINS_TLS_CA_FILE": str(setup[ca])},
    )


def _call(server: ServerProcess, text: str) -> httpx.Response:
    return httpx.post(server.url + "/run_remote", json={"text": text}, headers=server.headers, timeout=30)


@pytest.mark.parametrize("name", ["AsyncEntry", "SyncEntry"])
def test_a_caller_trusting_the_chains_ca_calls_over_tls(
    setup: dict[str, Path], leaves: dict[str, TlsServer], name: str
) -> None:
    leaf = leaves[CALLERS[name]]
    entry = _entry(setup, name, leaf, "mine")
    try:
        entry.start().wait_ready()
        answer = _call(entry, f"over tls {name}")
        assert answer.status_code == 200, answer.text
        assert answer.json() == f"over tls {name}"[::-1]
        wait_until(lambda: f"leaf got 'over tls {name}'" in leaf.logs(), 10, "the leaf's log line")
    finally:
        entry.kill()


@pytest.mark.parametrize("name", ["AsyncEntry", "SyncEntry"])
def test_a_caller_with_another_chains_ca_is_refused_before_sending_anything(
    setup: dict[str, Path], leaves: dict[str, TlsServer], name: str
) -> None:
    leaf = leaves[CALLERS[name]]
    entry = _entry(setup, name, leaf, "other")
    try:
        entry.start().wait_ready()
        answer = _call(entry, f"wrong ca {name}")
        assert answer.status_code == 503, answer.text
        error = json.dumps(answer.json())
        assert "CERTIFICATE_VERIFY_FAILED" in error or "certificate verify failed" in error, error
    finally:
        entry.kill()
    assert f"wrong ca {name}" not in leaf.logs()  # the request (with the token) never reached it


def test_a_stub_with_the_wrong_ca_is_refused_and_plain_http_gets_nothing(
    setup: dict[str, Path], leaves: dict[str, TlsServer]
) -> None:
    leaf = leaves["Leaf"]

    async def call(ca: str) -> str:
        stub = StubBase(
            leaf.url, token=TOKEN, options=StubOptions(retries=0), ssl_context=client_context(setup[ca])
        )
        try:
            return str(await stub.predict_async({"text": "direct"}))
        finally:
            await stub.aclose()

    assert asyncio.run(call("mine")) == "tcerid"
    with pytest.raises(DependencyUnavailable, match=r"(?i)certificate verify failed"):
        asyncio.run(call("other"))
    # Without TLS the port answers nothing: the server speaks TLS only.
    with pytest.raises(httpx.TransportError):
        httpx.post(
            f"http://127.0.0.1:{leaf.port}/run_remote",
            json={"text": "in clear"},
            headers=leaf.headers,
            timeout=5,
        )
    assert "in clear" not in leaf.logs()
