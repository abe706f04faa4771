"""chains.client without a network: what each refusal of an entrypoint is raised as, and the
synchronous driver of the stream readers."""

from __future__ import annotations

import asyncio
import json

import pytest

from chains.call_policy import answer_error
from chains.client import Client, _drive
from chains.errors import (
    ChainsRuntimeError,
    DeadlineExceeded,
    DependencyUnavailable,
    ErrorDetail,
    RemoteError,
)

URL = "http://127.0.0.1:1"


def _failure(url: str, status: int, payload: bytes, headers: dict[str, str]) -> Exception:
    """What the client raises for an answer: the mapping every caller shares."""
    return answer_error("the chain's entrypoint", url, status, payload, headers)


def body(payload: object) -> bytes:
    return json.dumps(payload).encode()


def test_an_error_detail_is_raised_as_the_original_type() -> None:
    detail = ErrorDetail(exc_type="KeyError", exc_module="builtins", message="'k'", chainlet="Entry")
    error = _failure(URL, 500, body({"error": detail.model_dump(mode="json")}), {})
    assert isinstance(error, RemoteError) and isinstance(error, KeyError)
    assert error.detail == detail


def test_refused_arguments_name_each_field() -> None:
    refused = {"detail": [{"loc": ["body", "text"], "msg": "Field required"}]}
    error = _failure(URL, 422, body(refused), {})
    assert isinstance(error, ValueError) and isinstance(error, RemoteError)
    assert "body.text: Field required" in str(error)


def test_overload_carries_retry_after_and_a_timeout_is_a_deadline() -> None:
    overloaded = _failure(URL, 503, body({"detail": "busy"}), {"retry-after": "2.5"})
    assert isinstance(overloaded, DependencyUnavailable) and overloaded.retry_after == 2.5
    remote = DependencyUnavailable("the Words chainlet is overloaded")
    sent = {"error": ErrorDetail.from_exception(remote).model_dump(mode="json")}
    raised = _failure(URL, 503, body(sent), {"retry-after": "3"})
    assert isinstance(raised, DependencyUnavailable) and raised.retry_after == 3.0
    assert isinstance(_failure(URL, 504, b"gateway timeout", {}), DeadlineExceeded)


def test_a_missing_key_says_to_pass_one() -> None:
    error = _failure(URL, 401, body({"detail": "missing credentials"}), {})
    assert type(error) is ChainsRuntimeError
    assert "401 missing credentials" in str(error) and "api_key" in str(error)


def test_the_driver_runs_what_never_waits_and_refuses_what_does() -> None:
    async def immediate() -> int:
        return 7

    assert _drive(immediate()) == 7

    async def waits() -> None:
        await asyncio.sleep(0)

    with pytest.raises(RuntimeError, match="event loop"):
        _drive(waits())


def test_a_url_without_a_scheme_is_refused() -> None:
    with pytest.raises(ValueError, match="http:// or https://"):
        Client("127.0.0.1:8000")
