"""The parts of the browser support that need no server: origins, policies, tickets, query
arguments and event ids."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pydantic
import pytest

import chains
from chains.errors import ChainsUsageError
from chains.origins import check_origin
from chains.server.cors import CorsPolicy
from chains.server.event_source import QueryError, finished, json_body, with_event_ids
from chains.server.settings import ServerSettings
from chains.server.tickets import TicketSigner


@pytest.mark.parametrize(
    ("given", "origin"),
    [
        ("https://app.example", "https://app.example"),
        ("HTTPS://App.Example/", "https://app.example"),
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("http://localhost:80", "http://localhost"),
        ("https://[::1]:8443", "https://[::1]:8443"),
        ("*", "*"),
    ],
)
def test_origins_are_kept_as_a_browser_sends_them(given: str, origin: str) -> None:
    assert check_origin(given) == origin


@pytest.mark.parametrize(
    ("given", "complaint"),
    [
        ("https://app.example/page", "has a path"),
        ("app.example", "is not an origin"),
        ("ftp://app.example", "is not an origin"),
        ("http://app.example:99999", "over 65535"),
        ("", "is not an origin"),
    ],
)
def test_a_wrong_origin_is_refused_saying_what_an_origin_is(given: str, complaint: str) -> None:
    with pytest.raises(ChainsUsageError, match=complaint) as info:
        check_origin(given)
    assert "scheme://host[:port]" in str(info.value) or "65535" in str(info.value)


def test_a_policy_allows_its_origins_only() -> None:
    policy = CorsPolicy.parse("https://a.example, http://127.0.0.1:8080 https://a.example")
    assert policy.origins == ("https://a.example", "http://127.0.0.1:8080")
    assert policy.allows("https://a.example") and policy.allows("http://127.0.0.1:8080")
    assert not policy.allows("https://b.example") and not policy.allows("null")
    assert not policy.allows("http://a.example")  # another scheme is another origin
    assert CorsPolicy.parse("*").allows("https://anything.example")
    assert not CorsPolicy.parse("")


def test_settings_read_the_origins_and_name_the_variable_of_a_bad_one() -> None:
    settings = ServerSettings.from_env({"CHAINS_CORS_ORIGINS": "https://a.example,https://b.example"})
    assert settings.cors.origins == ("https://a.example", "https://b.example")
    assert not ServerSettings.from_env({}).cors
    with pytest.raises(
        ChainsUsageError, match=re.escape("CHAINS_CORS_ORIGINS: CORS origin 'https://a.example/x' has a path")
    ):
        ServerSettings.from_env({"CHAINS_CORS_ORIGINS": "https://a.example/x"})


def test_remote_config_takes_origins_and_refuses_a_bad_one() -> None:
    config = chains.RemoteConfig(cors_origins=["HTTPS://App.Example", "https://app.example"])
    assert config.cors_origins == ["https://app.example"]
    with pytest.raises(ChainsUsageError, match=r"cors_origins(.|\n)*has a path"):
        chains.RemoteConfig(cors_origins=["https://app.example/index.html"])


def test_tickets_expire_and_are_bound_to_the_key_chain_and_entrypoint() -> None:
    signer = TicketSigner(b"key one", "chain", "Entry", ttl_sec=30)
    ticket = signer.issue(now=1_000.0)
    assert signer.refusal(ticket, now=1_029.0) is None
    assert "expired" in (signer.refusal(ticket, now=1_031.0) or "")
    assert "signature" in (TicketSigner(b"key two", "chain", "Entry").refusal(ticket, now=1_000.0) or "")
    # The same key on another chain, or another entrypoint's name: refused too.
    for chain, entrypoint in (("chain2", "Entry"), ("chain", "Entry2"), ("chainE", "ntry")):
        other = TicketSigner(b"key one", chain, entrypoint)
        assert "signature" in (other.refusal(ticket, now=1_000.0) or "")
    assert "not a stream ticket" in (signer.refusal("key one", now=1_000.0) or "")
    longer = ticket.replace(".1030.", ".9999.")  # a later expiry, signed by nobody
    assert "signature" in (signer.refusal(longer, now=1_000.0) or "")
    assert signer.issue(now=1_000.0) != ticket  # each has its own nonce


class Args(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    prompt: str
    n: int = 1
    flag: bool = False
    tags: list[str] = []
    limit: int | None = 3


def test_query_arguments_are_text_where_the_model_takes_text_and_json_elsewhere() -> None:
    body = json_body(Args, 'prompt=[1, 2]&n=3&flag=true&tags=["a","b"]&limit=null')
    assert Args.model_validate_json(body) == Args(
        prompt="[1, 2]", n=3, flag=True, tags=["a", "b"], limit=None
    )
    assert json_body(Args, "prompt=a+b%26c") == b'{"prompt":"a b&c"}'
    assert json_body(Args, "prompt=x&chains_ticket=t", skip=frozenset({"chains_ticket"})) == b'{"prompt":"x"}'
    # What is wrong stays for the model to report, with the parameter's own name.
    with pytest.raises(pydantic.ValidationError, match="tags"):
        Args.model_validate_json(json_body(Args, "prompt=x&tags=a"))
    with pytest.raises(QueryError) as info:
        json_body(Args, "prompt=x&tags=a&tags=b")
    assert info.value.errors[0]["loc"] == ["query", "tags"]


async def _collect(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def send(message: Any) -> None:
        sent.append(message)

    stamped = with_event_ids(send, "r1")
    for message in messages:
        await stamped(message)
    return sent


def test_event_ids_number_each_event_however_the_body_is_split() -> None:
    start = {
        "type": "http.response.start",
        "status": 200,
        "headers": [(b"content-type", b"text/event-stream")],
    }
    chunks = [b"data: a\n\ndata: b", b"\n\nevent: end\n", b"data: \n\n"]
    body = [{"type": "http.response.body", "body": chunk, "more_body": True} for chunk in chunks]
    sent = asyncio.run(
        _collect([start, *body, {"type": "http.response.body", "body": b"", "more_body": False}])
    )
    text = b"".join(m.get("body", b"") for m in sent[1:])
    assert text == b"id: r1:1\ndata: a\n\nid: r1:2\ndata: b\n\nid: r1:end\nevent: end\ndata: \n\n"
    assert finished("r1:end") and not finished("r1:2")


def test_event_ids_leave_other_answers_alone() -> None:
    start = {
        "type": "http.response.start",
        "status": 422,
        "headers": [(b"content-type", b"application/json")],
    }
    body = {"type": "http.response.body", "body": b'{"detail":"x"}\n\n'}
    sent = asyncio.run(_collect([start, body]))
    assert sent[1]["body"] == b'{"detail":"x"}\n\n'
