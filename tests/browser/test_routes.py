"""The browser-facing routes over plain HTTP (no browser needed): what a page's requests get."""

from __future__ import annotations

from typing import Any

import httpx

from chains.server.tickets import TicketSigner
from tests.browser_support import API_KEY, metric

TYPED_ENTRYPOINT = "Typed"  # tests/browser/chains/typed.py's entrypoint chainlet

KEY = {"authorization": f"Bearer {API_KEY}"}


def _calls(url: str, status: int, headers: dict[str, str] | None = None) -> float:
    return metric(
        httpx.get(f"{url}/metrics", headers=headers or {}).text, "chains_calls_total", status=str(status)
    )


def test_a_preflight_from_an_allowed_origin_names_the_methods_and_headers(
    streaming_chain: Any, page_origin: str
) -> None:
    answer = httpx.options(
        f"{streaming_chain.entrypoint_url}/run_remote",
        headers={
            "origin": page_origin,
            "access-control-request-method": "POST",
            "access-control-request-headers": "content-type,authorization,last-event-id",
        },
    )
    assert answer.status_code == 204
    assert answer.headers["access-control-allow-origin"] == page_origin
    assert set(answer.headers["access-control-allow-methods"].split(", ")) == {"GET", "POST", "OPTIONS"}
    allowed = set(answer.headers["access-control-allow-headers"].split(", "))
    assert {"content-type", "authorization", "accept", "last-event-id"} <= allowed
    assert {"x-chains-request-id", "x-chains-timeout"} <= allowed


def test_another_origin_gets_no_cors_headers(streaming_chain: Any, other_origin: str) -> None:
    url = streaming_chain.entrypoint_url
    preflight = httpx.options(
        f"{url}/run_remote", headers={"origin": other_origin, "access-control-request-method": "POST"}
    )
    assert preflight.status_code == 403 and "--cors-origin" in preflight.json()["detail"]
    assert not any(name.startswith("access-control-") for name in preflight.headers)
    post = httpx.post(
        f"{url}/run_remote", json={"prompt": "a", "max_tokens": 1}, headers={"origin": other_origin}
    )
    assert post.status_code == 200 and "access-control-allow-origin" not in post.headers
    runs = _calls(url, 200)
    get = httpx.get(f"{url}/run_remote?prompt=a", headers={"origin": other_origin})
    assert get.status_code == 403 and "access-control-allow-origin" not in get.headers
    assert _calls(url, 200) == runs


def test_answers_to_callers_without_an_origin_are_as_before(streaming_chain: Any) -> None:
    answer = httpx.post(
        f"{streaming_chain.entrypoint_url}/run_remote",
        json={"prompt": "a b", "max_tokens": 2},
        headers={"accept": "text/event-stream"},
    )
    assert answer.status_code == 200
    assert not any(name.startswith(("access-control-", "x-chains-stream")) for name in answer.headers)
    assert "id:" not in answer.text  # ids are for EventSource reconnects, on the GET form only


def test_internal_chainlets_never_answer_cors(streaming_chain: Any, page_origin: str) -> None:
    generator = streaming_chain.chainlets["Generator"][0]
    preflight = httpx.options(
        f"{generator}/run_remote", headers={"origin": page_origin, "access-control-request-method": "POST"}
    )
    assert preflight.status_code == 405
    assert not any(name.startswith("access-control-") for name in preflight.headers)
    assert httpx.get(f"{generator}/client.js").status_code == 404
    assert httpx.get(f"{generator}/run_remote?prompt=a").status_code == 405


def test_the_event_source_form_numbers_its_events_and_ends_with_an_end_id(streaming_chain: Any) -> None:
    answer = httpx.get(f"{streaming_chain.entrypoint_url}/run_remote?prompt=a+b&max_tokens=2")
    assert answer.headers["content-type"] == "text/event-stream"
    rid = answer.headers["x-chains-request-id"]
    events = [event for event in answer.text.split("\n\n") if event]
    ids = [event.splitlines()[0] for event in events]
    assert ids == [f"id: {rid}:{n}" for n in range(1, len(events))] + [f"id: {rid}:end"]
    assert events[-1].splitlines()[1:] == ["event: end", "data: "]


def test_a_reconnect_after_the_end_gets_204_and_after_a_cut_an_error_without_a_run(
    streaming_chain: Any,
) -> None:
    url = streaming_chain.entrypoint_url
    generator = streaming_chain.chainlets["Generator"][0]
    runs, generated = _calls(url, 200), _calls(generator, 200)
    ended = httpx.get(f"{url}/run_remote?prompt=a", headers={"last-event-id": "f00d:end"})
    assert ended.status_code == 204 and ended.content == b""
    cut = httpx.get(f"{url}/run_remote?prompt=a", headers={"last-event-id": "f00d:3"})
    assert cut.status_code == 200
    lines = cut.text.splitlines()
    assert lines[0].endswith(":end") and lines[1] == "event: error"
    assert '"exc_type":"StreamInterrupted"' in lines[2] and "not resumed or run again" in lines[2]
    assert _calls(url, 200) == runs + 1  # the error event's answer; nothing reached the Generator
    assert _calls(generator, 200) == generated


def test_query_arguments_are_validated_by_the_input_model(typed_chain: Any) -> None:
    url = f"{typed_chain.entrypoint_url}/run_remote"
    good = httpx.get(url, params={"count": "2", "tags": '["x","y"]', "delay": "0"}, headers=KEY)
    assert good.status_code == 200
    assert 'data: {"count":2,"tags":["x","y"]}' in good.text
    assert 'data: {"text":"y","index":1}' in good.text
    bad = httpx.get(url, params={"count": "two"}, headers=KEY)
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["count"]
    unknown = httpx.get(url, params={"count": "1", "colour": "red"}, headers=KEY)
    assert unknown.status_code == 422 and unknown.json()["detail"][0]["type"] == "extra_forbidden"
    twice = httpx.get(f"{url}?count=1&tags=a&tags=b", headers=KEY)
    assert twice.status_code == 422 and 'tags=["a","b"]' in twice.json()["detail"][0]["msg"]
    missing = httpx.get(url, headers=KEY)
    assert missing.status_code == 422 and missing.json()["detail"][0]["type"] == "missing"


def test_a_unary_endpoint_has_no_get_form(hello_chain: Any) -> None:
    answer = httpx.get(f"{hello_chain.entrypoint_url}/run_remote?names=[]")
    assert answer.status_code == 405 and answer.json() == {"detail": "use POST /run_remote"}


def test_stream_tickets(typed_chain: Any, streaming_chain: Any) -> None:
    base = typed_chain.entrypoint_url
    assert httpx.post(f"{base}/stream_ticket").status_code == 401
    assert httpx.post(f"{base}/stream_ticket", headers={"authorization": "Bearer wrong"}).status_code == 401
    issued = httpx.post(f"{base}/stream_ticket", headers=KEY)
    assert issued.status_code == 200 and issued.headers["cache-control"] == "no-store"
    ticket = issued.json()["ticket"]
    assert API_KEY not in ticket and issued.json()["expires_in"] == 60
    url = f"{base}/run_remote"
    assert httpx.get(url, params={"count": "1", "chains_ticket": ticket}).status_code == 200
    tampered = ticket[:-2] + ("AA" if not ticket.endswith("AA") else "BB")
    refused = httpx.get(url, params={"count": "1", "chains_ticket": tampered})
    assert refused.status_code == 401 and "signature" in refused.json()["detail"]
    expired = TicketSigner(API_KEY.encode(), "browser-typed", TYPED_ENTRYPOINT).issue(now=0.0)
    refused = httpx.get(url, params={"count": "1", "chains_ticket": expired})
    assert refused.status_code == 401 and "expired" in refused.json()["detail"]
    other_key = TicketSigner(b"another key", "browser-typed", TYPED_ENTRYPOINT).issue()
    assert httpx.get(url, params={"count": "1", "chains_ticket": other_key}).status_code == 401
    # A ticket opens GETs only: a POST still needs the key.
    post = httpx.post(url, json={"count": 1}, headers={"authorization": f"Bearer {ticket}"})
    assert post.status_code == 401
    without_key = httpx.post(f"{streaming_chain.entrypoint_url}/stream_ticket")
    assert without_key.status_code == 404 and "no API key" in without_key.json()["detail"]


def test_the_client_and_its_types_are_served_to_any_page(streaming_chain: Any, other_origin: str) -> None:
    script = httpx.get(f"{streaming_chain.entrypoint_url}/client.js", headers={"origin": other_origin})
    assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
    assert script.headers["access-control-allow-origin"] == "*"
    assert "export function stream(" in script.text and "export async function call(" in script.text
    types = httpx.get(f"{streaming_chain.entrypoint_url}/client.d.ts")
    assert types.status_code == 200 and "export function stream<" in types.text
