"""Generated chainlet servers as real processes on 127.0.0.1: every route and status code."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import msgpack
import pytest

from tests.helpers import TOKEN, ServerProcess, generate_chain, running, write_chain

CHAIN = '''
import asyncio
import os
from pathlib import Path
from typing import Annotated, AsyncIterator

import pydantic

import chains


class Point(pydantic.BaseModel):
    x: int
    y: int


class Total(pydantic.BaseModel):
    count: int


TYPES = chains.stream_types(Point, footer_type=Total)


class Echo(chains.ChainletBase):
    remote_config = chains.RemoteConfig(compute=chains.Compute(concurrency=2))

    async def run_remote(
        self, text: str, delay: float = 0.0, fail: bool = False, give_up: bool = False
    ) -> str:
        await asyncio.sleep(delay)
        if fail:
            raise ValueError(f"asked to fail on {text!r}")
        if give_up:
            raise TimeoutError("my own wait gave up")
        return text


class Lies(chains.ChainletBase):
    async def run_remote(self) -> int:
        return "not a number"  # type: ignore[return-value]


class Blocking(chains.ChainletBase):
    def run_remote(self, seconds: float) -> float:
        import time

        time.sleep(seconds)
        return seconds


class Tokens(chains.ChainletBase):
    async def run_remote(
        self, n: int, delay: float = 0.0, fail_at: int = -1, give_up_at: int = -1
    ) -> AsyncIterator[str]:
        for i in range(n):
            if i == fail_at:
                raise KeyError(f"token {i}")
            if i == give_up_at:
                raise TimeoutError("my own wait gave up")
            await asyncio.sleep(delay)
            yield f"t{i} "


class Points(chains.ChainletBase):
    async def run_remote(self, n: int) -> AsyncIterator[Point]:
        for i in range(n):
            yield Point(x=i, y=-i)


class Events(chains.ChainletBase):
    async def run_remote(self, n: int) -> AsyncIterator[chains.SSE]:
        for i in range(n):
            yield chains.SSE(f"line {i}\\nsecond line", event="tick", id=str(i))


class Structured(chains.ChainletBase):
    async def run_remote(self, n: int) -> Annotated[AsyncIterator[bytes], TYPES]:
        writer = chains.stream_writer(TYPES)
        for i in range(n):
            yield writer.yield_item(Point(x=i, y=i))
        yield writer.yield_footer(Total(count=n))


class Moody(chains.ChainletBase):
    """Ready only while the file named by MOODY_FILE is absent; slow to build."""

    def __init__(self) -> None:
        import time

        time.sleep(float(os.environ.get("MOODY_INIT_SEC", "0")))

    async def run_remote(self) -> str:
        return "ok"

    def is_healthy(self) -> bool:
        return not Path(os.environ["MOODY_FILE"]).exists()


@chains.mark_entrypoint
class Entry(chains.ChainletBase):
    def __init__(self, echo: Echo = chains.depends(Echo)) -> None:
        self._echo = echo

    async def run_remote(self, text: str) -> str:
        return await self._echo.run_remote(text)
'''


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("server")
    file = write_chain(folder / "src", CHAIN)
    names = ["Entry", "Lies", "Blocking", "Tokens", "Points", "Events", "Structured", "Moody"]
    dirs: dict[str, Path] = {}
    for name in names:  # each as the entrypoint of its own chain, so that each is generated
        dirs.update(generate_chain(file, folder / "out" / name, entrypoint=name))
    return dirs


def serve(generated: dict[str, Path], name: str, **kwargs: object) -> ServerProcess:
    return ServerProcess(generated[name], **kwargs)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def echo(generated: dict[str, Path]) -> Iterator[ServerProcess]:
    with running(serve(generated, "Echo")) as (server,):
        yield server


@pytest.fixture(scope="module")
def tokens(generated: dict[str, Path]) -> Iterator[ServerProcess]:
    with running(serve(generated, "Tokens", entrypoint=True)) as (server,):
        yield server


def post(server: ServerProcess, body: object, **headers: str) -> httpx.Response:
    merged = {**server.headers, **headers}
    return httpx.post(server.url + "/run_remote", content=json.dumps(body), headers=merged, timeout=10)


def test_unary_call_and_request_id(echo: ServerProcess) -> None:
    response = post(echo, {"text": "hi"}, **{"x-chains-request-id": "rid-123"})
    assert response.status_code == 200 and response.json() == "hi"
    assert response.headers["x-chains-request-id"] == "rid-123"
    made_up = post(echo, {"text": "hi"}).headers["x-chains-request-id"]
    assert len(made_up) == 32


def test_health_routes(echo: ServerProcess) -> None:
    assert httpx.get(echo.url + "/healthz").json() == {"status": "alive"}
    assert httpx.get(echo.url + "/readyz").json()["ready"] is True


def test_internal_chainlet_needs_the_token(echo: ServerProcess) -> None:
    body = json.dumps({"text": "hi"})
    missing = httpx.post(echo.url + "/run_remote", content=body, headers={"content-type": "application/json"})
    assert missing.status_code == 401 and "missing credentials" in missing.json()["detail"]
    wrong = httpx.post(
        echo.url + "/run_remote",
        content=body,
        headers={"authorization": "Bearer nope", "content-type": "application/json"},
    )
    assert wrong.status_code == 401 and wrong.json() == {"detail": "wrong credentials"}
    assert TOKEN not in echo.logs()


def test_bad_input_is_422_with_pydantics_errors(echo: ServerProcess) -> None:
    wrong_type = post(echo, {"text": 3})
    assert wrong_type.status_code == 422
    (error,) = wrong_type.json()["detail"]
    assert error["loc"] == ["text"] and error["type"] == "string_type"
    unknown = post(echo, {"text": "a", "extra": 1})
    assert unknown.status_code == 422 and unknown.json()["detail"][0]["type"] == "extra_forbidden"
    broken = httpx.post(echo.url + "/run_remote", content=b"{not json", headers=echo.headers)
    assert broken.status_code == 422 and broken.json()["detail"][0]["type"] == "json_invalid"


def test_wrong_content_type_is_415(echo: ServerProcess) -> None:
    response = httpx.post(
        echo.url + "/run_remote", content=b"text=hi", headers={**echo.headers, "content-type": "text/plain"}
    )
    assert response.status_code == 415 and "application/json" in response.json()["detail"]


def test_every_refusal_carries_the_callers_request_id(echo: ServerProcess) -> None:
    rid = {"x-chains-request-id": "refused-7"}
    body = json.dumps({"text": "hi"})
    no_token = httpx.post(
        echo.url + "/run_remote", content=body, headers={"content-type": "application/json", **rid}
    )
    not_json = httpx.post(
        echo.url + "/run_remote", content=body, headers={**echo.headers, "content-type": "text/plain", **rid}
    )
    invalid = post(echo, {"text": 3}, **rid)
    for response, status in ((no_token, 401), (not_json, 415), (invalid, 422)):
        assert response.status_code == status, response.text
        assert response.headers["x-chains-request-id"] == "refused-7"
        assert response.json()["detail"]


def test_oversized_body_is_413_before_it_is_read(generated: dict[str, Path]) -> None:
    with running(serve(generated, "Echo", env={"CHAINS_MAX_BODY_BYTES": "1000"})) as (server,):
        big = json.dumps({"text": "x" * 2000})
        assert post(server, {"text": "x" * 2000}).status_code == 413

        def chunks() -> Iterator[bytes]:  # no Content-Length: the limit holds while streaming in
            for i in range(0, len(big), 100):
                yield big[i : i + 100].encode()

        chunked = httpx.post(server.url + "/run_remote", content=chunks(), headers=server.headers)
        assert chunked.status_code == 413
        assert post(server, {"text": "small"}).status_code == 200


def test_unknown_route_and_wrong_method(echo: ServerProcess) -> None:
    missing = httpx.get(echo.url + "/nope")
    assert missing.status_code == 404 and "POST /run_remote" in missing.json()["detail"]
    assert httpx.get(echo.url + "/run_remote").status_code == 405


def test_user_exception_is_500_with_its_detail(echo: ServerProcess) -> None:
    response = post(echo, {"text": "x", "fail": True})
    assert response.status_code == 500
    detail = response.json()["error"]
    assert (detail["exc_type"], detail["exc_module"], detail["chainlet"]) == (
        "ValueError",
        "builtins",
        "Echo",
    )
    assert detail["message"] == "asked to fail on 'x'"
    assert "chain.py" in detail["traceback"] and "chains/server" not in detail["traceback"]


def test_result_not_matching_the_annotation_is_500(generated: dict[str, Path]) -> None:
    with running(serve(generated, "Lies")) as (server,):
        response = post(server, {})
        assert response.status_code == 500
        assert "valid integer" in response.json()["error"]["message"]


def test_deadline_header_cancels_the_call_with_504(echo: ServerProcess) -> None:
    started = time.monotonic()
    response = post(echo, {"text": "slow", "delay": 5}, **{"x-chains-timeout": "0.3"})
    assert response.status_code == 504 and time.monotonic() - started < 3
    assert response.json()["error"]["exc_type"] == "DeadlineExceeded"


def test_concurrency_queue_then_503(generated: dict[str, Path]) -> None:
    # concurrency 2 (from Compute), one call may wait; the fourth is refused.
    with running(serve(generated, "Echo", env={"CHAINS_MAX_QUEUE": "1"})) as (server,):
        results: list[int] = []

        def slow() -> None:
            results.append(post(server, {"text": "x", "delay": 1.0}).status_code)

        threads = [threading.Thread(target=slow) for _ in range(3)]
        for thread in threads:
            thread.start()
            time.sleep(0.1)
        refused = post(server, {"text": "y"})
        for thread in threads:
            thread.join(10)
        assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
        assert sorted(results) == [200, 200, 200]
        metrics = httpx.get(server.url + "/metrics").text
        assert 'chains_calls_total{chainlet="Echo",status="503"} 1' in metrics


def test_sync_endpoints_run_in_threads_concurrently(generated: dict[str, Path]) -> None:
    with running(serve(generated, "Blocking", env={"CHAINS_CONCURRENCY": "4"})) as (server,):
        started = time.monotonic()
        threads = [threading.Thread(target=post, args=(server, {"seconds": 0.5})) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        assert time.monotonic() - started < 1.5  # four 0.5 s calls side by side, not in a row
        assert httpx.get(server.url + "/healthz").status_code == 200


def test_metrics_are_prometheus_text(echo: ServerProcess) -> None:
    post(echo, {"text": "m"})
    response = httpx.get(echo.url + "/metrics")
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    text = response.text
    assert "# TYPE chains_call_duration_seconds histogram" in text
    assert 'chains_call_duration_seconds_bucket{chainlet="Echo",le="+Inf"}' in text
    assert "chains_in_flight" in text and TOKEN not in text


def test_openapi_describes_the_endpoint(echo: ServerProcess, tokens: ServerProcess) -> None:
    document = httpx.get(echo.url + "/openapi.json").json()
    operation = document["paths"]["/run_remote"]["post"]
    schema = document["components"]["schemas"]["EchoInput"]
    assert schema["required"] == ["text"] and set(schema["properties"]) == {
        "text",
        "delay",
        "fail",
        "give_up",
    }
    assert operation["responses"]["200"]["content"]["application/json"]["schema"] == {"type": "string"}
    streaming = httpx.get(tokens.url + "/openapi.json").json()["paths"]["/run_remote"]["post"]
    assert set(streaming["responses"]["200"]["content"]) >= {
        "application/x-chains-stream",
        "text/event-stream",
    }
    assert httpx.get(echo.url + "/docs").status_code == 404  # docs only on the entrypoint
    page = httpx.get(tokens.url + "/docs")
    assert page.status_code == 200 and "run_remote(n: int" in page.text


def test_text_stream_forms(tokens: ServerProcess) -> None:
    body = {"n": 3}
    raw = post(tokens, body)
    assert raw.headers["content-type"] == "text/plain; charset=utf-8" and raw.text == "t0 t1 t2 "
    sse = post(tokens, body, accept="text/event-stream")
    assert sse.headers["content-type"].startswith("text/event-stream")
    assert sse.text.endswith("event: end\ndata: \n\n") and "data: t1 \n\n" in sse.text
    framed = post(tokens, body, accept="application/x-chains-stream")
    assert framed.headers["content-type"] == "application/x-chains-stream"
    assert framed.content.startswith(b"P") and b"t2 " in framed.content


def test_curl_shows_tokens_as_they_come(tokens: ServerProcess) -> None:
    process = subprocess.Popen(
        [
            "curl",
            "-sN",
            tokens.url + "/run_remote",
            "-H",
            "Content-Type: application/json",
            "-d",
            json.dumps({"n": 3, "delay": 0.4}),
        ],
        stdout=subprocess.PIPE,
    )
    assert process.stdout is not None
    started = time.monotonic()
    first = process.stdout.read(3)
    first_at = time.monotonic() - started
    rest = process.stdout.read()
    assert process.wait(10) == 0
    assert first + rest == b"t0 t1 t2 "
    assert first_at < 1.0  # the first token did not wait for the whole stream (1.2 s)


def test_error_mid_stream_in_each_form(tokens: ServerProcess) -> None:
    body = {"n": 4, "fail_at": 2}
    sse = post(tokens, body, accept="text/event-stream")
    assert "event: error" in sse.text and "event: end" not in sse.text
    assert '"exc_type":"KeyError"' in sse.text
    framed = post(tokens, body, accept="application/x-chains-stream")
    assert b"KeyError" in framed.content
    with pytest.raises(httpx.RemoteProtocolError):  # raw: the response is visibly broken
        post(tokens, body)
    early = post(tokens, {"n": 4, "fail_at": 0})  # before the first item: a plain 500
    assert early.status_code == 500 and early.json()["error"]["exc_type"] == "KeyError"


@pytest.mark.parametrize("give_up_at", [0, 2])
def test_run_remotes_own_timeout_error_is_not_the_callers_deadline(
    echo: ServerProcess, tokens: ServerProcess, give_up_at: int
) -> None:
    # A TimeoutError of run_remote's own (its wait for something else gave up) is reported as
    # it is, also while a deadline is set that has not passed: never as a DeadlineExceeded.
    deadline = {"x-chains-timeout": "30"}
    unary = post(echo, {"text": "x", "give_up": True}, **deadline)
    assert unary.status_code == 500 and unary.json()["error"]["exc_type"] == "TimeoutError"
    body = {"n": 4, "give_up_at": give_up_at}
    answer = post(tokens, body, accept="text/event-stream", **deadline)
    if give_up_at == 0:  # before the first item: a plain 500
        assert answer.status_code == 500 and answer.json()["error"]["exc_type"] == "TimeoutError"
    else:
        assert answer.text.startswith("data: t0 \n\ndata: t1 \n\n")
        assert '"exc_type":"TimeoutError"' in answer.text and "my own wait gave up" in answer.text
        assert "DeadlineExceeded" not in answer.text


def test_the_callers_deadline_ends_a_stream_with_deadline_exceeded(tokens: ServerProcess) -> None:
    started = time.monotonic()
    answer = post(tokens, {"n": 50, "delay": 0.1}, accept="text/event-stream", **{"x-chains-timeout": "0.5"})
    assert time.monotonic() - started < 3
    assert answer.text.startswith("data: t0 \n\n") and "data: t10 " not in answer.text
    assert '"exc_type":"DeadlineExceeded"' in answer.text and "event: end" not in answer.text


def test_typed_items_sse_and_structured_streams(generated: dict[str, Path]) -> None:
    servers = (
        serve(generated, "Points", entrypoint=True),
        serve(generated, "Events", entrypoint=True),
        serve(generated, "Structured", entrypoint=True),
    )
    with running(*servers) as (points, events, structured):
        ndjson = post(points, {"n": 2})
        assert ndjson.headers["content-type"] == "application/x-ndjson"
        assert [json.loads(line) for line in ndjson.text.splitlines()] == [
            {"x": 0, "y": 0},
            {"x": 1, "y": -1},
        ]
        stream = post(events, {"n": 2}, accept="text/event-stream")
        assert "event: tick\nid: 1\ndata: line 1\ndata: second line\n\n" in stream.text
        lines = post(structured, {"n": 2}).text.splitlines()
        assert [json.loads(line) for line in lines] == [
            {"item": {"x": 0, "y": 0}},
            {"item": {"x": 1, "y": 1}},
            {"footer": {"count": 2}},
        ]


def test_readyz_follows_init_and_is_healthy(generated: dict[str, Path], tmp_path: Path) -> None:
    flag = tmp_path / "unhealthy"
    server = serve(generated, "Moody", env={"MOODY_FILE": str(flag), "MOODY_INIT_SEC": "1"})
    server.start()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                alive = httpx.get(server.url + "/healthz", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.05)
        assert alive.status_code == 200
        assert httpx.get(server.url + "/readyz").status_code == 503  # __init__ still sleeping
        assert post(server, {}).status_code == 503
        server.wait_ready()
        flag.touch()
        not_ready = httpx.get(server.url + "/readyz")
        assert not_ready.status_code == 503 and "is_healthy() returned False" in not_ready.json()["detail"]
    finally:
        server.kill()


def test_on_an_inherited_socket_calls_wait_for_init_instead_of_503(
    generated: dict[str, Path], tmp_path: Path
) -> None:
    """A supervisor hands a process its listening socket, which the process it replaces may
    still serve: the new one accepts only once built, so no call meets it "not ready yet"."""
    server = serve(generated, "Moody", env={"MOODY_FILE": str(tmp_path / "absent"), "MOODY_INIT_SEC": "1"})
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listening:
        listening.bind(("127.0.0.1", server.port))
        listening.listen(16)
        with open(server.log_path, "ab") as log:
            process = subprocess.Popen(
                [sys.executable, "server.py", "--fd", str(listening.fileno())],
                cwd=server.directory,
                env=server.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(listening.fileno(),),
            )
        try:
            # Sent while __init__ sleeps: it waits in the backlog, then is answered.
            answer = httpx.post(server.url + "/run_remote", json={}, headers=server.headers, timeout=20)
            assert answer.status_code == 200 and answer.json() == "ok", answer.text
            assert httpx.get(server.url + "/readyz", timeout=5).status_code == 200
        finally:
            process.kill()
            process.wait(10)


def test_sigterm_drains_an_inflight_stream_then_exits_0(generated: dict[str, Path]) -> None:
    server = serve(generated, "Tokens", entrypoint=True).start().wait_ready()
    try:
        received: list[bytes] = []
        with (
            httpx.Client(headers=server.headers, timeout=10) as kept,
            httpx.stream(
                "POST",
                server.url + "/run_remote",
                json={"n": 10, "delay": 0.1},
                headers=server.headers,
                timeout=10,
            ) as response,
        ):
            # A connection opened before the drain, idle when it starts.
            assert kept.post(server.url + "/run_remote", json={"n": 1}).status_code == 200
            iterator = response.iter_bytes()
            received.append(next(iterator))
            assert server.process is not None
            server.process.send_signal(15)
            time.sleep(0.3)
            # No new connection is accepted, but a call on one already open is answered, and
            # the connection closed after it.
            with pytest.raises(httpx.ConnectError):
                httpx.get(server.url + "/healthz", timeout=2)
            late = kept.post(server.url + "/run_remote", json={"n": 2})
            assert late.status_code == 200 and late.content == b"t0 t1 "
            assert late.headers["connection"] == "close"
            received.extend(iterator)
        assert b"".join(received) == b"".join(f"t{i} ".encode() for i in range(10))
        assert server.process.wait(15) == 0
    finally:
        server.kill()


def test_a_repeated_sigterm_does_not_cut_the_drain_short(generated: dict[str, Path]) -> None:
    """dockerd stopping a swarm node signals each task twice: the second SIGTERM must not
    cancel the calls the first one left to finish (they would get a bare 500)."""
    server = serve(generated, "Tokens", entrypoint=True).start().wait_ready()
    try:
        with httpx.stream(
            "POST",
            server.url + "/run_remote",
            json={"n": 10, "delay": 0.1},
            headers=server.headers,
            timeout=10,
        ) as response:
            iterator = response.iter_bytes()
            received = [next(iterator)]
            assert server.process is not None
            server.process.send_signal(signal.SIGTERM)
            time.sleep(0.2)
            server.process.send_signal(signal.SIGTERM)
            received.extend(iterator)
        assert response.status_code == 200
        assert b"".join(received) == b"".join(f"t{i} ".encode() for i in range(10))
        assert server.process.wait(15) == 0
        assert "SIGTERM again" in server.logs() and "still draining" in server.logs()
    finally:
        server.kill()


def test_request_id_appears_in_log_lines(echo: ServerProcess) -> None:
    post(echo, {"text": "x", "fail": True}, **{"x-chains-request-id": "trace-me-42"})
    time.sleep(0.2)
    lines = [line for line in echo.logs().splitlines() if "asked to fail" in line or "raised" in line]
    assert any("rid=trace-me-42" in line for line in lines), echo.logs()[-2000:]


def test_messagepack_arguments_and_result(echo: ServerProcess) -> None:
    headers = {**echo.headers, "content-type": "application/x-msgpack", "accept": "application/x-msgpack"}
    response = httpx.post(
        echo.url + "/run_remote", content=msgpack.packb({"text": "packed"}), headers=headers
    )
    assert response.status_code == 200 and response.headers["content-type"] == "application/x-msgpack"
    assert msgpack.unpackb(response.content) == "packed"
    broken = httpx.post(echo.url + "/run_remote", content=b"\xc1", headers=headers)
    assert broken.status_code == 422 and "not MessagePack" in broken.json()["detail"][0]["msg"]
