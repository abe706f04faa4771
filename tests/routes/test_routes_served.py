"""`@chains.route` endpoints served by real chainlet processes (local target), called over HTTP,
by `chains call --route`, through generated stubs from another chainlet, and under run_local."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import chains
from chains.loader import import_chain_file
from chains.tracing.store import SpanRecord, store_path, trace_spans
from tests.helpers import Cli, unique_port, wait_until

CHAIN = Path(__file__).with_name("routed_chain.py")
KEY = "routes-key"
module, _ = import_chain_file(CHAIN)

EXPECTED = [
    "7:teax3:hi",
    "tea 0",
    "tea 1",
    "either one: tea",
    "either event: tea 0",
    "either event: tea 1",
    "either event: tea 2",
]


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CHAINS_HOME", str(folder))
        yield folder


@pytest.fixture(scope="module")
def front(home: Path) -> Iterator[chains.deploy.ChainHandle]:
    with chains.push(CHAIN, name="routed", port=unique_port(), api_key=KEY) as handle:
        yield handle


@pytest.fixture(scope="module")
def shop(home: Path) -> Iterator[str]:
    """The Shop alone, as an entrypoint without a key: its routes called from outside."""
    with chains.push(module.Shop, name="routed-shop", port=unique_port()) as handle:
        yield handle.entrypoint_url


def _auth() -> dict[str, str]:
    return {"authorization": f"Bearer {KEY}"}


def test_stubs_call_each_route_by_name_value_stream_and_either(front: chains.deploy.ChainHandle) -> None:
    assert front.call(item="tea", quantity=3) == EXPECTED


@pytest.mark.parametrize("serialize", [True, False])
async def test_run_local_gives_the_same_answers(serialize: bool) -> None:
    with chains.run_local(serialize=serialize):
        assert await module.Front().run_remote("tea", 3) == EXPECTED


def test_a_route_takes_the_whole_body_and_carries_unknown_fields(front: chains.deploy.ChainHandle) -> None:
    body = {"item": "cup", "quantity": 2, "colour": "blue", "nested": {"a": [1]}}
    answer = httpx.post(front.entrypoint_url + "/v1/echo", json=body, headers=_auth())
    assert answer.status_code == 200, answer.text
    assert answer.json() == body
    refused = httpx.post(front.entrypoint_url + "/v1/echo", json=body)
    assert refused.status_code == 401
    assert "missing credentials" in refused.json()["detail"]


def test_path_query_and_header_parameters(shop: str) -> None:
    answer = httpx.post(
        shop + "/orders/42?note=fast",
        json={"item": "pen", "quantity": 5, "gift": True},
        headers={"x-customer": "ada"},
    )
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "order_id": "42",
        "item": "pen",
        "quantity": 5,
        "note": "fast for ada",
        "extra": {"gift": True},
    }


def test_a_stream_route_answers_as_it_goes_in_the_form_asked_for(shop: str) -> None:
    with httpx.stream("GET", shop + "/count/3?word=tock") as response:
        assert response.headers["content-type"].startswith("text/plain")
        assert response.read().decode() == "tock 0\ntock 1\ntock 2\n"
    sse = httpx.get(shop + "/count/2", headers={"accept": "text/event-stream"})
    assert sse.headers["content-type"].startswith("text/event-stream")
    assert "data: tick 1" in sse.text


def test_a_value_or_stream_route_answers_either(shop: str) -> None:
    one = httpx.post(shop + "/either", json={"item": "a"})
    assert one.headers["content-type"] == "application/json" and one.json()["order_id"] == "one"
    many = httpx.post(shop + "/either", json={"item": "a", "quantity": 2})
    assert many.headers["content-type"].startswith("text/event-stream")
    # Bare events, as event clients expect: no closing `end` event.
    assert many.text == "data: a 0\n\ndata: a 1\n\n"


def test_errors_the_method_raises_and_requests_that_do_not_fit(shop: str) -> None:
    conflict = httpx.post(shop + "/orders/1", json={"item": "x", "quantity": -1})
    assert (conflict.status_code, conflict.json()) == (409, {"problem": "negative quantity"})
    broke = httpx.post(shop + "/orders/1", json={"item": "boom"})
    assert broke.status_code == 500 and broke.json()["error"]["message"] == "the shop broke"
    missing = httpx.post(shop + "/orders/1", json={"quantity": 1})
    assert missing.status_code == 422
    assert missing.json()["detail"][0]["loc"] == ["order", "item"]
    not_json = httpx.post(shop + "/orders/1", content=b"{nope")
    assert not_json.status_code == 400 and "not valid JSON" in not_json.json()["detail"]
    bad_path = httpx.get(shop + "/count/many")
    assert bad_path.status_code == 422 and bad_path.json()["detail"][0]["loc"] == ["n"]
    wrong_method = httpx.get(shop + "/orders/1")
    assert (wrong_method.status_code, wrong_method.headers["allow"]) == (405, "POST")
    assert httpx.get(shop + "/nowhere").status_code == 404


def test_openapi_describes_each_route(shop: str) -> None:
    paths: dict[str, Any] = httpx.get(shop + "/openapi.json").json()["paths"]
    place = paths["/orders/{order_id}"]["post"]
    assert place["operationId"] == "place"
    where = {(p["name"], p["in"], p["required"]) for p in place["parameters"]}
    assert where == {("order_id", "path", True), ("note", "query", False), ("x-customer", "header", False)}
    assert place["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Order"
    }
    assert "text/event-stream" in paths["/either"]["post"]["responses"]["200"]["content"]
    assert "application/json" in paths["/either"]["post"]["responses"]["200"]["content"]
    assert "get" in paths["/count/{n}"]


def test_chains_call_route(front: chains.deploy.ChainHandle, shop: str, home: Path) -> None:
    cli = Cli(home)
    echoed = cli.run(
        "call", "routed", "--route", "POST /v1/echo", "--json", '{"item": "mug"}', "--api-key", KEY
    )
    assert '"item": "mug"' in echoed.stdout
    counted = cli.run("call", "routed-shop", "--route", "GET /count/2?word=hey")
    assert counted.stdout == "hey 0\nhey 1\n"
    failed = cli.run(
        "call",
        "routed-shop",
        "--route",
        "POST /orders/1",
        "--json",
        '{"item": "x", "quantity": -1}',
        check=False,
    )
    assert failed.returncode != 0 and "HTTP 409" in failed.stderr
    typo = cli.run("call", "routed-shop", "--route", "FETCH /x", check=False)
    assert typo.returncode != 0 and "--route takes 'METHOD /PATH'" in typo.stderr


def _stored(home: Path, chain: str, request_id: str, names: set[str]) -> list[SpanRecord]:
    """The spans of ``request_id``'s trace in ``chain``'s store, once every one of ``names`` is there."""
    path = store_path(home / chain)
    found: list[SpanRecord] = []

    def complete() -> bool:
        found[:] = trace_spans(path, request_id)
        return names <= {span.name for span in found}

    wait_until(complete, 20, f"spans {sorted(names)} of request {request_id} in the store")
    return found


def test_route_calls_make_server_spans_children_of_the_stubs_attempts(
    front: chains.deploy.ChainHandle, home: Path
) -> None:
    request_id = "ab" * 16  # 32 hex digits: the trace id of a call that comes without one
    answer = httpx.post(
        front.entrypoint_url + "/run_remote",
        json={"item": "tea", "quantity": 3},
        headers={**_auth(), "x-chains-request-id": request_id},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    routes = {"Shop.place", "Shop.count", "Shop.either"}
    spans = _stored(home, "routed", request_id, routes | {"Front.run_remote"})
    by_id = {span.span_id: span for span in spans}
    assert {span.trace_id for span in spans} == {request_id}
    served_by_route = [span for span in spans if span.name in routes]
    # place and count once each; either twice (a value, then a stream)
    assert sorted(span.name for span in served_by_route) == [
        "Shop.count",
        "Shop.either",
        "Shop.either",
        "Shop.place",
    ]
    for served in served_by_route:
        assert (served.kind, served.service, served.status) == ("server", "Shop", "unset")
        assert served.request_id == request_id
        assert served.attributes["http.response.status_code"] == 200
        attempt = by_id[served.parent_id]  # the stub's attempt, in the entrypoint
        assert (attempt.kind, attempt.name, attempt.service) == ("client", "call Shop", "Front")
    (count,) = [span for span in spans if span.name == "Shop.count"]
    assert count.attributes["chains.stream.items"] == 2


def test_a_route_call_from_outside_is_a_trace_and_its_failure_is_recorded(shop: str, home: Path) -> None:
    request_id = "cd" * 16
    broke = httpx.post(shop + "/orders/1", json={"item": "boom"}, headers={"x-chains-request-id": request_id})
    assert broke.status_code == 500
    (span,) = _stored(home, "routed-shop", request_id, {"Shop.place"})
    assert (span.trace_id, span.parent_id, span.status) == (request_id, "", "error")
    assert span.attributes["http.response.status_code"] == 500
    assert [event["name"] for event in span.events] == ["exception"]
    assert "the shop broke" in span.events[0]["attributes"]["exception.message"]


def test_docs_lists_every_route_with_run_remote_and_the_server_routes(
    front: chains.deploy.ChainHandle,
) -> None:
    page = httpx.get(front.entrypoint_url + "/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    for route in ("POST /v1/echo", "POST /run_remote", "GET /healthz", "GET /readyz"):
        assert f'data-route="{route}"' in page.text, route
    # The entrypoint of a pushed chain serves async calls: the page names those routes too.
    assert 'data-route="POST /async_run_remote"' in page.text


def test_the_shops_docs_list_its_routes_and_a_404_names_them(shop: str) -> None:
    page = httpx.get(shop + "/docs").text
    for route in ("POST /orders/{order_id}", "GET /count/{n}", "POST /either"):
        assert f'data-route="{route}"' in page, route
    missing = httpx.get(shop + "/nowhere")
    assert missing.status_code == 404
    detail = missing.json()["detail"]
    assert detail.startswith("no route GET /nowhere; routes: POST /run_remote")
    assert "/orders/{order_id}" in detail and "GET /healthz" in detail
    # A cold route asked with a method it does not take: 405 naming the one it does, as JSON.
    wrong = httpx.post(shop + "/healthz")
    assert (wrong.status_code, wrong.headers["allow"], wrong.json()) == (
        405,
        "GET",
        {"detail": "use GET /healthz"},
    )
