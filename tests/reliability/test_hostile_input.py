"""Hostile input at every example's entrypoint: fuzzed and crafted bodies, and slow clients.

Every example chain (``examples/*/chain.py``) is pushed as it is shipped. Whatever a client
sends (malformed JSON, wrong types, huge numbers, deep nesting, oversized or slow bodies,
headers that never end), the answer is a 4xx with a JSON reason, or a complete 200; never a
500, never a stream that breaks, never a hang. The servers stay healthy throughout.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chains.deploy import ChainHandle
from chains.endpoint import EndpointSpec
from chains.loader import load_chain
from chains.server.openapi import example_arguments
from chains.server.settings import DEFAULT_MAX_BODY_BYTES
from tests.reliability.conftest import ROOT, pushed, record

# Fuzzing here is of HTTP bodies: a WebSocket entrypoint answers any POST with 426 (it speaks
# only after an upgrade), and its hostile peers are tried in tests/integration/test_websocket.py.
EXAMPLES = sorted(
    file
    for file in (ROOT / "examples").glob("*/chain.py")
    if not load_chain(file).entrypoint.endpoint.output_kind.is_socket
)
# Short limits for slow clients, so that the slow-client tests are bounded in time.
HEAD_TIMEOUT_SEC = 1.5
BODY_TIMEOUT_SEC = 1.5
STREAM_BUDGET_SEC = 1.0  # how long a 200 stream is read before the client leaves (a valid, long one)

FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@dataclass
class Target:
    name: str
    handle: ChainHandle
    endpoint: EndpointSpec
    valid: dict[str, Any]
    answers: dict[int, int] = field(default_factory=dict)  # status -> count

    @property
    def url(self) -> str:
        return self.handle.entrypoint_url + "/run_remote"


@pytest.fixture(scope="module")
def targets(chains_home: Path) -> Iterator[dict[str, Target]]:
    assert EXAMPLES, "no examples found"
    with pytest.MonkeyPatch.context() as patch:
        # Inherited by the chainlet processes through the supervisor.
        patch.setenv("CHAINS_HEADER_TIMEOUT_SEC", str(HEAD_TIMEOUT_SEC))
        patch.setenv("CHAINS_BODY_TIMEOUT_SEC", str(BODY_TIMEOUT_SEC))
        found: dict[str, Target] = {}
        stack: list[Any] = []
        try:
            for file in EXAMPLES:
                chain = load_chain(file)
                context = pushed(chain.entrypoint.name, f"hostile-{file.parent.name}", file=file)
                handle = context.__enter__()
                stack.append(context)
                endpoint = chain.entrypoint.endpoint
                name = file.parent.name
                found[name] = Target(name, handle, endpoint, example_arguments(endpoint))
            yield found
        finally:
            for context in reversed(stack):
                context.__exit__(None, None, None)
    record(
        "hostile_input_answers",
        examples=sorted(found),
        answers={name: {str(k): v for k, v in sorted(t.answers.items())} for name, t in found.items()},
    )


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=httpx.Timeout(10)) as http:
        yield http


def check_answer(
    client: httpx.Client, target: Target, body: bytes, content_type: str = "application/json"
) -> int:
    """Send ``body`` and check the answer: a 4xx with a JSON reason, or a 200 that is whole
    (for a stream: unbroken for as long as we read it). A hang fails through the client's timeout."""
    with client.stream("POST", target.url, content=body, headers={"content-type": content_type}) as response:
        status = response.status_code
        target.answers[status] = target.answers.get(status, 0) + 1
        if status != 200:
            payload = json.loads(response.read())
            assert 400 <= status < 500, f"{status} for {body[:200]!r}: {payload}"
            assert isinstance(payload, dict) and payload.get("detail"), payload
            return status
        if not target.endpoint.is_stream:
            json.loads(response.read())
            return status
        started = time.monotonic()
        for _ in response.iter_raw():  # a broken transfer raises here
            if time.monotonic() - started > STREAM_BUDGET_SEC:
                break  # a valid, long stream: leaving is fine
        return status


def assert_healthy(client: httpx.Client, target: Target) -> None:
    base = target.handle.entrypoint_url
    assert client.get(base + "/healthz").status_code == 200
    assert client.get(base + "/readyz").status_code == 200
    assert check_answer(client, target, json.dumps(target.valid).encode()) == 200


# -- generated input -------------------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=50),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=12), inner, max_size=6),
    max_leaves=25,
)
# Numbers JSON allows but Python's int/float may not take: thousands of digits, beyond float.
huge_numbers = st.one_of(
    st.integers(min_value=20, max_value=6000).map(lambda n: "9" * n),
    st.integers(min_value=20, max_value=6000).map(lambda n: "-1" + "0" * n),
    st.sampled_from(["1e400", "-1e400", "1e-400", "NaN", "Infinity", "-Infinity", "0.1e999999999"]),
)


def nested(depth: int, kind: str) -> str:
    return ("[" * depth + "]" * depth) if kind == "list" else ('{"a":' * depth + "1" + "}" * depth)


@pytest.mark.parametrize("example", [f.parent.name for f in EXAMPLES])
def test_malformed_bodies_are_refused_with_a_reason(
    targets: dict[str, Target], client: httpx.Client, example: str
) -> None:
    target = targets[example]
    valid = json.dumps(target.valid).encode()

    @FUZZ
    @given(
        st.one_of(
            st.binary(max_size=300),
            st.text(alphabet='{}[]":,0123456789.eE-+ truefalsn\\u\n', max_size=120).map(str.encode),
            # A valid body cut short, or with one byte changed.
            st.integers(min_value=0, max_value=len(valid) - 1).map(lambda n: valid[:n]),
            st.tuples(st.integers(min_value=0, max_value=len(valid) - 1), st.integers(0, 255)).map(
                lambda p: valid[: p[0]] + bytes([p[1]]) + valid[p[0] + 1 :]
            ),
        )
    )
    def fuzz(body: bytes) -> None:
        check_answer(client, target, body)

    fuzz()
    assert_healthy(client, target)


@pytest.mark.parametrize("example", [f.parent.name for f in EXAMPLES])
def test_wrong_types_and_extra_fields_are_refused_with_a_reason(
    targets: dict[str, Target], client: httpx.Client, example: str
) -> None:
    target = targets[example]
    params = [p.name for p in target.endpoint.params]

    @FUZZ
    @given(
        st.one_of(
            json_values,  # not even an object, mostly
            st.fixed_dictionaries(
                {}, optional={name: json_values for name in params} | {"unexpected": json_values}
            ),
        )
    )
    def fuzz(arguments: Any) -> None:
        check_answer(client, target, json.dumps(arguments).encode())

    fuzz()
    assert_healthy(client, target)


@pytest.mark.parametrize("example", [f.parent.name for f in EXAMPLES])
def test_huge_numbers_and_deep_nesting_in_every_parameter(
    targets: dict[str, Target], client: httpx.Client, example: str
) -> None:
    target = targets[example]
    params = [p.name for p in target.endpoint.params]

    @FUZZ
    @given(
        st.sampled_from(params),
        st.one_of(
            huge_numbers,
            st.tuples(st.integers(1, 200_000), st.sampled_from(["list", "object"])).map(lambda t: nested(*t)),
        ),
    )
    def fuzz(param: str, literal: str) -> None:
        # Raw JSON text: json.dumps could not write most of these.
        others = {k: v for k, v in target.valid.items() if k != param}
        body = json.dumps(others)[:-1] + (", " if others else "") + f'"{param}": {literal}}}'
        check_answer(client, target, body.encode())

    fuzz()
    for depth in (10_000, 1_000_000):  # nesting as a whole body, deeper than any parser recursion
        check_answer(client, target, nested(depth, "list").encode())
    assert_healthy(client, target)


@pytest.mark.parametrize("example", [f.parent.name for f in EXAMPLES])
def test_content_types_other_than_json_are_refused(
    targets: dict[str, Target], client: httpx.Client, example: str
) -> None:
    target = targets[example]
    valid = json.dumps(target.valid).encode()

    @FUZZ
    # Printable ASCII without surrounding blanks: what an HTTP client lets through.
    @given(st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=40).map(str.strip))
    def fuzz(content_type: str) -> None:
        check_answer(client, target, valid, content_type or "x")

    fuzz()
    assert_healthy(client, target)


@pytest.mark.parametrize("example", [f.parent.name for f in EXAMPLES])
def test_oversized_bodies_are_refused_before_they_are_read(
    targets: dict[str, Target], client: httpx.Client, example: str
) -> None:
    target = targets[example]
    port = int(target.handle.entrypoint_url.rsplit(":", 1)[1])
    limit = DEFAULT_MAX_BODY_BYTES

    # A declared length over the limit: refused from the headers alone, no body sent.
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            b"POST /run_remote HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {limit + 1}\r\n\r\n".encode()
        )
        head = sock.recv(65536)
    assert head.startswith(b"HTTP/1.1 413"), head[:200]

    # A chunked body with no declared length, growing past the limit.
    def chunks() -> Iterator[bytes]:
        piece = b" " * 2**20
        yield b'{"x": "'
        for _ in range(limit // len(piece) + 2):
            yield piece

    response = client.post(target.url, content=chunks(), headers={"content-type": "application/json"})
    assert response.status_code == 413 and "limit" in response.json()["detail"]

    # Every parameter as long as the body limit allows: refused by the chain's own bounds, or
    # answered whole.
    for param in target.valid:
        big = {**target.valid, param: "x" * (limit - 1000)}
        check_answer(client, target, json.dumps(big).encode())
        if isinstance(target.valid[param], list):
            check_answer(client, target, json.dumps({**target.valid, param: ["x"] * (limit // 8)}).encode())
    assert_healthy(client, target)


def _head(body_length: int) -> bytes:
    return (
        b"POST /run_remote HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {body_length}\r\n\r\n".encode()
    )


@pytest.mark.parametrize("example", [f.parent.name for f in EXAMPLES])
def test_slow_clients_are_cut_off_and_others_are_served_meanwhile(
    targets: dict[str, Target], client: httpx.Client, example: str
) -> None:
    target = targets[example]
    port = int(target.handle.entrypoint_url.rsplit(":", 1)[1])
    valid = json.dumps(target.valid).encode()
    per_kind = 40
    outcomes: dict[str, list[str]] = {"idle": [], "slow_head": [], "slow_body": [], "slow_but_whole": []}
    lock = threading.Lock()

    def slow_client(kind: str) -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=15) as sock:
            started = time.monotonic()
            sock.settimeout(0.25)
            if kind == "slow_head":
                to_send = _head(len(valid))[:-4]  # the head never ends
            elif kind == "slow_body":
                sock.sendall(_head(len(valid) + 1000))
                to_send = valid  # a thousand bytes short
            elif kind == "slow_but_whole":
                sock.sendall(_head(len(valid)))
                to_send = valid
            else:
                to_send = b""
            # One byte every 0.25 s at most, and only for as long as the server listens.
            step = max(1, len(to_send) // 4) if kind == "slow_but_whole" else 1
            answer = b""
            while time.monotonic() - started < 12:
                if to_send:
                    try:
                        sock.sendall(to_send[:step])
                    except OSError:
                        break
                    to_send = to_send[step:]
                try:
                    data = sock.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    break
                if not data:
                    break  # the server closed the connection
                answer += data
                if kind == "slow_but_whole" and b"\r\n\r\n" in answer:
                    break
            elapsed = time.monotonic() - started
        status = answer.split(b" ", 2)[1].decode() if answer.startswith(b"HTTP/1.1 ") else "closed"
        with lock:
            outcomes[kind].append(f"{status} after {elapsed:.1f}s")

    threads = [threading.Thread(target=slow_client, args=(k,)) for k in outcomes for _ in range(per_kind)]
    for thread in threads:
        thread.start()
    # Meanwhile everyone else is answered as usual.
    latencies = []
    deadline = time.monotonic() + 2 * HEAD_TIMEOUT_SEC + 1
    while time.monotonic() < deadline:
        started = time.monotonic()
        assert check_answer(client, target, valid) == 200
        latencies.append(time.monotonic() - started)
    for thread in threads:
        thread.join(20)
    assert not any(thread.is_alive() for thread in threads)

    def seconds(outcome: str) -> float:
        return float(outcome.rsplit(" ", 1)[1].rstrip("s"))

    for kind in ("idle", "slow_head"):
        # Closed without an answer, within two head timeouts.
        assert all(o.startswith("closed") for o in outcomes[kind]), outcomes[kind]
        assert max(seconds(o) for o in outcomes[kind]) < 2 * HEAD_TIMEOUT_SEC + 1, outcomes[kind]
    assert all(o.startswith("408") for o in outcomes["slow_body"]), outcomes["slow_body"]
    assert max(seconds(o) for o in outcomes["slow_body"]) < BODY_TIMEOUT_SEC + 1, outcomes["slow_body"]
    assert all(o.startswith("200") for o in outcomes["slow_but_whole"]), outcomes["slow_but_whole"]
    assert max(latencies) < 1.0 + (STREAM_BUDGET_SEC if target.endpoint.is_stream else 0), max(latencies)
    assert_healthy(client, target)
    record(
        f"hostile_slow_clients_{example}",
        slow_clients={k: len(v) for k, v in outcomes.items()},
        outcomes={k: sorted({o.split(" ")[0] for o in v}) for k, v in outcomes.items()},
        slowest_cutoff_sec={k: max(seconds(o) for o in v) for k, v in outcomes.items()},
        other_calls_meanwhile=len(latencies),
        slowest_other_call_sec=round(max(latencies), 3),
    )
