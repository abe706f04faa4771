"""Streams through a real reverse proxy: nginx in front of the entrypoint and between chainlets.

A proxy re-chunks, buffers (in memory or on disk), compresses and times out. Whatever it
does, a stream must arrive byte for byte as on the direct path, or, when the proxy gives
up, be read on from where it stopped (the stubs, chains/server/reconnect.py) or arrive visibly
broken (a plain client): never a shorter stream that looks complete.

Processes: one Producer; a TextEntry and a StructuredEntry that call it directly; and per
proxy variant a TextEntry that calls the Producer through that variant. nginx has a site
per variant in front of each direct entrypoint, and one in front of the Producer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from chains.streaming import stream_reader
from chains.stubs import StubOptions
from tests.helpers import ServerProcess, generate_chain, running, unique_port
from tests.nginx import Nginx, Site
from tests.reliability.clients import (
    ITEMS,
    StructuredStub,
    TextStub,
    as_sse_text,
    expected_text,
    payload,
    read_raw,
    read_sse,
    sse_items,
)
from tests.reliability.conftest import SAMPLE, record

# Proxy variants. Every site speaks HTTP/1.1 to its upstream (see tests/nginx.py, _COMMON).
VARIANTS: dict[str, list[str]] = {
    "unbuffered": ["proxy_buffering off;"],
    # nginx's default: buffering on, which the server's `X-Accel-Buffering: no` turns off per stream.
    "buffered": ["proxy_buffering on;"],
    # Buffering forced on with 1 KiB buffers, in memory only: items larger than a buffer.
    "small_buffers": [
        "proxy_buffering on;",
        "proxy_ignore_headers X-Accel-Buffering;",
        "proxy_buffer_size 1k;",
        "proxy_buffers 4 1k;",
        "proxy_busy_buffers_size 1k;",
        "proxy_max_temp_file_size 0;",
    ],
    # The same, spilling to temporary files on disk.
    "disk_buffers": [
        "proxy_buffering on;",
        "proxy_ignore_headers X-Accel-Buffering;",
        "proxy_buffer_size 1k;",
        "proxy_buffers 2 1k;",
        "proxy_busy_buffers_size 1k;",
        "proxy_temp_file_write_size 1k;",
    ],
    # A proxy that compresses everything its client accepts compressed.
    "gzip": [
        "proxy_buffering off;",
        "gzip on;",
        "gzip_types *;",
        "gzip_min_length 1;",
        "gzip_proxied any;",
    ],
}
TIMEOUTS: dict[str, list[str]] = {
    "timeout_unbuffered": ["proxy_buffering off;", "proxy_read_timeout 1s;"],
    "timeout_buffered": [*VARIANTS["small_buffers"], "proxy_read_timeout 1s;"],
}
ACCEPT = {"framed": "application/x-chains-stream", "sse": "text/event-stream", "raw": ""}
# Two shapes: many small items, and items several times a proxy buffer.
SHAPES = [{"n": 400, "size": 7, "delay": 0.0005}, {"n": 24, "size": 5000, "delay": 0.005}]


@dataclass
class Topology:
    """Who listens where: direct entrypoints, entrypoints calling through each variant, nginx."""

    text: ServerProcess
    structured: ServerProcess
    via: dict[str, ServerProcess]  # variant -> TextEntry calling the Producer through it
    nginx: Nginx

    def front(self, variant: str, entry: str) -> str:
        return self.nginx[f"front-{entry}-{variant}"].url


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory, nginx_bin: str) -> Iterator[Topology]:
    folder = tmp_path_factory.mktemp("proxy")
    dirs = generate_chain(SAMPLE, folder / "text", entrypoint="TextEntry")
    dirs.update(generate_chain(SAMPLE, folder / "structured", entrypoint="StructuredEntry"))
    logs = folder / "logs"
    logs.mkdir()
    producer = ServerProcess(dirs["Producer"], port=unique_port(), log=logs / "Producer.log")
    variants = {**VARIANTS, **TIMEOUTS}
    between = {v: Site(f"between-{v}", producer.url, d) for v, d in variants.items()}
    direct = {"Producer": [producer.url]}

    def entry(name: str, deps: dict[str, list[str]], log: str) -> ServerProcess:
        return ServerProcess(
            dirs[name], port=unique_port(), entrypoint=True, dependencies=deps, log=logs / f"{log}.log"
        )

    text = entry("TextEntry", direct, "TextEntry")
    structured = entry("StructuredEntry", direct, "StructuredEntry")
    via = {
        v: entry("TextEntry", {"Producer": [site.url]}, f"TextEntry-via-{v}") for v, site in between.items()
    }
    fronts = [
        Site(f"front-{name}-{v}", server.url, d)
        for v, d in variants.items()
        for name, server in (("text", text), ("structured", structured))
    ]
    nginx = Nginx(nginx_bin, folder / "nginx", [*between.values(), *fronts])
    with running(producer, text, structured, *via.values()):
        nginx.start()
        try:
            yield Topology(text, structured, via, nginx)
        finally:
            nginx.stop()


async def fetch(
    client: httpx.AsyncClient, url: str, form: str, arguments: dict[str, Any], encodings: list[str]
) -> bytes:
    """The whole body of one call, as the client's HTTP library hands it over (decompressed);
    the response's Content-Encoding is added to ``encodings``."""
    headers = {"accept": ACCEPT[form]} if ACCEPT[form] else {}
    async with client.stream("POST", url + "/run_remote", json=arguments, headers=headers) as response:
        assert response.status_code == 200, await response.aread()
        encodings.append(response.headers.get("content-encoding", "identity"))
        return b"".join([chunk async for chunk in response.aiter_bytes()])


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_streams_through_nginx_arrive_identical_to_the_direct_path(topology: Topology, variant: str) -> None:
    compared: dict[str, int] = {}
    encodings: list[str] = []

    async def scenario() -> None:
        async with httpx.AsyncClient(timeout=30) as client:
            for shape in SHAPES:
                for form in ACCEPT:
                    paths = {
                        # (what is compared, direct URL, proxied URL)
                        "front_text": (topology.text.url, topology.front(variant, "text")),
                        "front_structured": (topology.structured.url, topology.front(variant, "structured")),
                        "between_text": (topology.text.url, topology.via[variant].url),
                    }
                    for path, (direct_url, proxied_url) in paths.items():
                        direct = await fetch(client, direct_url, form, shape, [])
                        proxied = await fetch(client, proxied_url, form, shape, encodings)
                        assert proxied == direct, f"{path} {form} {shape}: {len(proxied)}/{len(direct)} bytes"
                        compared[f"{path}/{form}"] = compared.get(f"{path}/{form}", 0) + len(direct)
                # And typed clients, which check every frame, through the proxy in front.
                n, size = int(shape["n"]), int(shape["size"])
                once = StubOptions(retries=0)
                texts = TextStub(topology.front(variant, "text"), options=once)
                assert [t async for t in texts.run_remote(n, size, shape["delay"])] == [
                    payload(i, size) for i in range(n) if size
                ]
                structured = StructuredStub(topology.front(variant, "structured"), options=once)
                reader = stream_reader(ITEMS, structured.run_remote(n, size, shape["delay"]))
                assert (await reader.read_header()).n == n
                items = [item.text async for item in reader.read_items()]
                assert items == [payload(i, size) for i in range(n)]
                assert (await reader.read_footer()).characters == n * size
                await texts.aclose()
                await structured.aclose()

    asyncio.run(scenario())
    gzipped = encodings.count("gzip")
    if variant == "gzip":
        # The proxy really compressed what it passed to clients that accept gzip.
        assert gzipped > 0, encodings
    record(
        f"proxy_identical_{variant}",
        directives=VARIANTS[variant],
        bytes_compared=compared,
        mismatches=0,
        gzip_responses=gzipped,
    )


def test_the_sse_and_raw_forms_carry_the_text(topology: Topology) -> None:
    """What `identical` is compared against: the direct path itself is right."""

    async def scenario() -> None:
        async with httpx.AsyncClient(timeout=30) as client:
            raw = await read_raw(client, topology.text.url, {"n": 50, "size": 33})
            assert raw.error is None and raw.body.decode() == expected_text(50, 33)
            sse = await read_sse(client, topology.text.url, {"n": 50, "size": 33})
            assert sse_items(sse) == [as_sse_text(payload(i, 33)) for i in range(50)]
            assert sse.event_names[-1] == "end"

    asyncio.run(scenario())


STALL_ITEMS = 20
STALL = {"n": STALL_ITEMS, "size": 50, "delay": 0.01, "stall_after": 5, "stall": 3.0}


async def _read_whole(url: str) -> list[str]:
    """The STALL stream read through a stub with no retries: it reads on after each cut."""
    stub = TextStub(url, options=StubOptions(retries=0))
    try:
        return [text async for text in stub.run_remote(**STALL)]  # type: ignore[arg-type]
    finally:
        await stub.aclose()


@pytest.mark.parametrize("variant", list(TIMEOUTS))
def test_a_proxy_timeout_in_front_of_the_entrypoint_is_read_on_by_a_stub(
    topology: Topology, variant: str
) -> None:
    """The entrypoint stalls longer than the proxy waits: the proxy cuts every client's stream.
    A stub reads it on from where it stopped, of the same run (chains/server/reconnect.py);
    clients that did not ask for that see the cut transfer."""
    url = topology.front(variant, "text")

    async def scenario() -> dict[str, object]:
        seen = await _read_whole(url)
        assert seen == [payload(i, 50) for i in range(STALL_ITEMS)]
        async with httpx.AsyncClient(timeout=30) as client:
            raw = await read_raw(client, url, STALL)
            sse = await read_sse(client, url, STALL)
        assert isinstance(raw.error, httpx.RemoteProtocolError), raw.error
        assert raw.body.decode() == expected_text(5, 50)
        assert isinstance(sse.error, httpx.RemoteProtocolError), sse.error
        assert "end" not in sse.event_names and len(sse_items(sse)) == 5
        return {"stub_items": len(seen)}

    figures = asyncio.run(scenario())
    record(
        f"proxy_timeout_front_{variant}",
        proxy_read_timeout_sec=1,
        producer_stall_sec=STALL["stall"],
        stub="read on after the cut: every item",
        raw="transfer cut",
        sse="transfer cut, no end event",
        **figures,
    )


@pytest.mark.parametrize("variant", list(TIMEOUTS))
def test_a_proxy_timeout_between_chainlets_is_read_on_inside_the_chain(
    topology: Topology, variant: str
) -> None:
    """The Producer stalls longer than the proxy in front of it waits: the entrypoint's read is
    cut, and its stub reads on from where it stopped, so every client of the entrypoint gets
    the whole stream, whichever form it asked for."""
    url = topology.via[variant].url

    async def scenario() -> dict[str, object]:
        seen = await _read_whole(url)
        assert seen == [payload(i, 50) for i in range(STALL_ITEMS)]
        async with httpx.AsyncClient(timeout=30) as client:
            raw = await read_raw(client, url, STALL)
            sse = await read_sse(client, url, STALL)
        assert raw.error is None and raw.body.decode() == expected_text(STALL_ITEMS, 50), raw.error
        assert sse.error is None and sse.event_names[-1] == "end"
        assert len(sse_items(sse)) == STALL_ITEMS
        return {"stub_items": len(seen)}

    figures = asyncio.run(scenario())
    record(
        f"proxy_timeout_between_{variant}",
        proxy_read_timeout_sec=1,
        producer_stall_sec=STALL["stall"],
        raw="whole",
        sse="whole, with its end event",
        **figures,
    )


def test_nginx_logged_the_timeouts_and_the_disk_buffering(topology: Topology) -> None:
    # A check on the test itself: the cuts above were nginx's read timeouts, not something else.
    errors = topology.nginx.errors()
    assert "upstream timed out" in errors, errors[-3000:]


def test_a_slow_client_behind_disk_buffers_gets_the_whole_stream(topology: Topology) -> None:
    """nginx spills to disk only when its client reads slower than the upstream writes: a client
    that pauses over an 8 MB stream makes it do so; the stream still arrives whole."""
    url = topology.front("disk_buffers", "structured")
    n, size = 800, 10_000

    async def scenario() -> int:
        stub = StructuredStub(url, options=StubOptions(retries=0))
        reader = stream_reader(ITEMS, stub.run_remote(n, size))
        assert (await reader.read_header()).n == n
        count = 0
        async for item in reader.read_items():
            if count == 0:
                await asyncio.sleep(1.5)  # nginx fills the socket, its buffers, then a temp file
            assert item.i == count and item.text == payload(count, size)
            count += 1
        assert (await reader.read_footer()).characters == n * size
        await stub.aclose()
        return count

    assert asyncio.run(scenario()) == n
    errors = topology.nginx.errors()
    assert "buffered to a temporary file" in errors, errors[-3000:]
    record("proxy_disk_buffers_slow_client", items=n, bytes=n * size, spilled_to_disk=True)
