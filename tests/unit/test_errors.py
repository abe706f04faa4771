from __future__ import annotations

import pickle

import pytest

import chains
from chains.errors import ErrorDetail


def _raise_value_error() -> None:
    raise ValueError("bad prompt")


def _detail_of(fn: object, chainlet: str) -> ErrorDetail:
    try:
        fn()  # type: ignore[operator]
    except Exception as exc:
        return ErrorDetail.from_exception(exc, chainlet)
    raise AssertionError("no exception")


def test_remote_error_is_the_original_builtin_type() -> None:
    detail = _detail_of(_raise_value_error, "Words")
    error = chains.RemoteError.from_detail(detail)
    assert isinstance(error, ValueError) and isinstance(error, chains.RemoteError)
    assert error.detail == detail
    assert "ValueError: bad prompt" in str(error)
    assert "_raise_value_error" in str(error)  # the user's frame travels


def test_non_builtin_types_stay_plain_remote_errors() -> None:
    class Custom(Exception):
        pass

    def boom() -> None:
        raise Custom("x")

    error = chains.RemoteError.from_detail(_detail_of(boom, "A"))
    assert type(error) is chains.RemoteError
    assert "Custom: x" in str(error)


def test_every_hop_is_shown_innermost_last() -> None:
    inner = chains.RemoteError.from_detail(_detail_of(_raise_value_error, "Inner"))

    def middle() -> None:
        raise inner

    middle_detail = _detail_of(middle, "Middle")
    assert middle_detail.exc_type == "ValueError" and middle_detail.cause is not None
    outer = chains.RemoteError.from_detail(middle_detail)
    text = str(outer)
    assert isinstance(outer, ValueError)
    assert text.index("in chainlet Middle") < text.index("in chainlet Inner")
    assert [hop.chainlet for hop in middle_detail.hops()] == ["Middle", "Inner"]


def test_library_frames_are_left_out() -> None:
    def call_into_pydantic() -> None:
        import pydantic

        pydantic.TypeAdapter(int).validate_python("nope")

    detail = _detail_of(call_into_pydantic, "A")
    assert "call_into_pydantic" in detail.traceback
    assert "pydantic/" not in detail.traceback and "site-packages" not in detail.traceback


@pytest.mark.parametrize("name", ["KeyError", "TypeError", "OSError", "ConnectionError", "TimeoutError"])
def test_builtin_types_can_be_mixed_in(name: str) -> None:
    detail = ErrorDetail(exc_type=name, exc_module="builtins", message="m")
    assert isinstance(
        chains.RemoteError.from_detail(detail),
        __builtins__[name] if isinstance(__builtins__, dict) else getattr(__builtins__, name),
    )


def test_remote_errors_survive_pickling() -> None:
    error = chains.RemoteError.from_detail(_detail_of(_raise_value_error, "W"))
    again = pickle.loads(pickle.dumps(error))
    assert isinstance(again, ValueError) and again.detail == error.detail


def test_deadline_exceeded_is_a_timeout_error() -> None:
    assert issubclass(chains.DeadlineExceeded, TimeoutError)
    assert issubclass(chains.StreamInterrupted, chains.ChainsRuntimeError)


def test_os_error_family_survives_pickling() -> None:
    error = chains.RemoteError.from_detail(
        ErrorDetail(exc_type="ConnectionError", exc_module="builtins", message="m")
    )
    again = pickle.loads(pickle.dumps(error))
    assert isinstance(again, ConnectionError) and isinstance(again, chains.RemoteError)
    assert str(again) == str(error)
