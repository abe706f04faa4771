from __future__ import annotations

import importlib
import os
import pickle
import pkgutil

import pytest

import chains
import chains.errors
from chains.errors import ErrorDetail
from chains.server.settings import ServerSettings, check_api_key


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


def test_non_builtin_types_are_generic_remote_exceptions() -> None:
    class Custom(Exception):
        pass

    def boom() -> None:
        raise Custom("x")

    error = chains.RemoteError.from_detail(_detail_of(boom, "A"))
    assert isinstance(error, chains.GenericRemoteException) and isinstance(error, chains.RemoteError)
    assert not isinstance(error, Custom)
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


# -- every error class chains raises crosses hops as itself ----------------------------------


def _chains_error_classes() -> list[type[chains.ChainsError]]:
    """Every public ChainsError subclass in any chains module, found by walking the package, so
    that a class added anywhere is covered without being listed here."""
    for module in pkgutil.walk_packages(chains.__path__, "chains."):
        if module.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(module.name)
        except ModuleNotFoundError as exc:
            # A module that runs only where its optional extra is installed (ray_app in a Ray
            # replica, say); every error class lives in chains.errors, which a test checks.
            if (exc.name or "chains").split(".")[0] == "chains":
                raise
    found: set[type[chains.ChainsError]] = set()
    pending: list[type[chains.ChainsError]] = [chains.ChainsError]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        rebuilt = issubclass(cls, chains.RemoteError) and cls is not chains.RemoteError
        if cls.__module__.startswith("chains") and not cls.__name__.startswith("_") and not rebuilt:
            found.add(cls)
    return sorted(found, key=lambda cls: cls.__name__)


ERROR_CLASSES = _chains_error_classes()


def _builtin_bases(cls: type) -> list[type]:
    return [base for base in cls.__mro__ if base.__module__ == "builtins" and base is not object]


def test_the_discovery_finds_the_classes_of_every_layer() -> None:
    names = {cls.__name__ for cls in ERROR_CLASSES}
    assert {"DeadlineExceeded", "DependencyUnavailable", "StreamInterrupted", "FrameTooLarge"} <= names
    assert {"StreamSchemaMismatch", "UnknownFrameKind", "BuildFailed", "ChainsUsageError"} <= names


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda cls: cls.__name__)
def test_each_error_class_is_defined_in_errors_and_exported(cls: type[chains.ChainsError]) -> None:
    assert cls.__module__ == "chains.errors", f"define {cls.__name__} in chains/errors/"
    assert cls.__name__ in chains.errors.__all__ and getattr(chains.errors, cls.__name__) is cls
    if cls.__name__ in chains.__all__:
        assert getattr(chains, cls.__name__) is cls
    else:  # a name of the protocol's: refused at the top, naming where it is
        with pytest.raises(AttributeError, match=rf"it is chains\.errors\.{cls.__name__}\b"):
            getattr(chains, cls.__name__)
    assert cls.__name__ in (chains.errors.__doc__ or ""), "draw it in the hierarchy of the docstring"


def _hop(error: BaseException, chainlet: str) -> BaseException:
    """What the caller of ``chainlet`` raises when ``error`` escapes its run_remote: the detail
    goes over the wire as JSON (as in a 500 body or an error frame) and is rebuilt there."""

    def run_remote() -> None:
        raise error

    detail = _detail_of(run_remote, chainlet)
    return chains.RemoteError.from_detail(ErrorDetail.model_validate_json(detail.model_dump_json()))


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda cls: cls.__name__)
def test_each_error_class_crosses_hops_as_itself_and_its_builtin_bases(cls: type[chains.ChainsError]) -> None:
    origin = ErrorDetail(
        exc_type=cls.__name__, exc_module=cls.__module__, message="it broke", chainlet="Leaf"
    )
    error: BaseException = chains.RemoteError.from_detail(origin)
    for chainlet in ("Mid", "Front", "Entry"):
        error = _hop(error, chainlet)
        assert isinstance(error, cls) and isinstance(error, chains.RemoteError)
        for base in _builtin_bases(cls):
            assert isinstance(error, base), f"a remote {cls.__name__} is no longer a {base.__name__}"
    assert isinstance(error, chains.RemoteError) and error.detail is not None
    assert [hop.chainlet for hop in error.detail.hops()] == ["Entry", "Front", "Mid", "Leaf"]
    assert str(error).startswith(f"chains.errors.{cls.__name__}: it broke")
    # The attributes the class declares read on the rebuilt error (their class default).
    for name in getattr(cls, "__annotations__", {}):
        getattr(error, name)
    again = pickle.loads(pickle.dumps(error))
    assert isinstance(again, cls) and again.detail == error.detail


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda cls: cls.__name__)
def test_each_error_class_is_rebuilt_from_the_module_it_used_to_live_in(
    cls: type[chains.ChainsError],
) -> None:
    # A chainlet of an older version names e.g. chains.framing for StreamProtocolError.
    detail = ErrorDetail(exc_type=cls.__name__, exc_module="chains.framing", message="m")
    assert isinstance(chains.RemoteError.from_detail(detail), cls)


def test_a_remote_deadline_is_caught_as_a_timeout_error() -> None:
    detail = ErrorDetail(exc_type="DeadlineExceeded", exc_module="chains.errors", message="too slow")
    with pytest.raises(TimeoutError, match="too slow"):
        raise _hop(chains.RemoteError.from_detail(detail), "Entry")


def test_a_remote_dependency_unavailable_is_caught_as_a_connection_error() -> None:
    detail = ErrorDetail(exc_type="DependencyUnavailable", exc_module="chains.errors", message="busy")
    with pytest.raises(ConnectionError, match="busy") as caught:
        raise chains.RemoteError.from_detail(detail)
    assert caught.value.retry_after is None  # type: ignore[attr-defined]


def test_stream_errors_are_the_same_classes_where_the_streaming_package_names_them() -> None:
    from chains import streaming
    from chains.streaming import framing

    assert framing.StreamProtocolError is chains.StreamProtocolError
    assert (
        framing.FrameTooLarge is chains.errors.FrameTooLarge
        and framing.UnknownFrameKind is chains.errors.UnknownFrameKind
    )
    assert streaming.StreamProtocolError is chains.StreamProtocolError


# -- what leaves the chain ---------------------------------------------------------------------


def test_the_public_form_keeps_type_message_and_request_id_only() -> None:
    inner = chains.RemoteError.from_detail(_detail_of(_raise_value_error, "Words"))

    def entry() -> None:
        raise inner

    full = _detail_of(entry, "Entry")
    assert full.cause is not None and "_raise_value_error" in full.render()
    public = full.public("rid-7")
    assert (public.exc_type, public.exc_module, public.message) == ("ValueError", "builtins", "bad prompt")
    assert public.chainlet == "Entry" and public.request_id == "rid-7"
    assert public.traceback == "" and public.cause is None
    assert os.sep + "tests" not in public.model_dump_json()  # no server path
    error = chains.RemoteError.from_detail(public)
    assert isinstance(error, ValueError)
    assert "request id rid-7" in str(error) and "_raise_value_error" not in str(error)


def test_an_error_sent_as_is_is_reported_as_exactly_its_detail() -> None:
    public = _detail_of(_raise_value_error, "Entry").public("rid-8")

    def stream_producer() -> None:
        raise public.as_exception()

    assert _detail_of(stream_producer, "Entry") == public


@pytest.mark.parametrize(
    ("value", "shown"), [("", None), ("1", True), ("true", True), ("0", False), ("FALSE", False)]
)
def test_chains_debug_errors_switches_tracebacks(value: str, shown: bool | None) -> None:
    settings = ServerSettings.from_env({"CHAINS_DEBUG_ERRORS": value, "CHAINS_ENVIRONMENT": "docker"})
    assert settings.debug_errors is shown
    assert settings.shows_tracebacks is bool(shown)


def test_tracebacks_go_to_every_caller_only_when_debugging_is_asked_for() -> None:
    # On the local target too: there, only the owner's `chains call` gets them (see app.py).
    assert not ServerSettings.from_env({"CHAINS_ENVIRONMENT": "local"}).shows_tracebacks
    assert not ServerSettings.from_env({"CHAINS_ENVIRONMENT": "kubernetes"}).shows_tracebacks
    assert not ServerSettings.from_env({}).shows_tracebacks
    local_on = {"CHAINS_ENVIRONMENT": "local", "CHAINS_DEBUG_ERRORS": "1"}
    assert ServerSettings.from_env(local_on).shows_tracebacks


def test_a_malformed_debug_switch_is_refused_naming_it() -> None:
    with pytest.raises(chains.ChainsUsageError, match="CHAINS_DEBUG_ERRORS='yes' must be one of"):
        ServerSettings.from_env({"CHAINS_DEBUG_ERRORS": "yes"})


# -- API keys ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        (" Zq9w", "a space at position 1"),
        ("Zq9w ", "a space at position 5"),
        ("Zq9wé", "a non-ASCII character at position 5"),
        ("Zq9w\t", "a control character at position 5"),
    ],
)
def test_an_api_key_that_cannot_travel_in_a_header_is_refused(key: str, problem: str) -> None:
    with pytest.raises(chains.ChainsUsageError, match=problem) as caught:
        check_api_key(key)
    assert "Zq9w" not in str(caught.value)  # the key itself is never printed
    with pytest.raises(chains.ChainsUsageError, match=f"CHAINS_API_KEY has {problem}"):
        ServerSettings.from_env({"CHAINS_API_KEY": key})


def test_a_printable_ascii_api_key_is_accepted() -> None:
    key = "".join(chr(c) for c in range(0x21, 0x7F))
    check_api_key(key)
    assert ServerSettings.from_env({"CHAINS_API_KEY": key}).api_key == key


def test_a_remote_error_of_the_users_own_type_is_a_generic_remote_exception() -> None:
    detail = ErrorDetail(exc_type="QuotaExceeded", exc_module="billing.errors", message="over quota")
    error = chains.RemoteError.from_detail(detail)
    assert isinstance(error, chains.GenericRemoteException) and isinstance(error, chains.RemoteError)
    assert not isinstance(error, ValueError)
    builtin = chains.RemoteError.from_detail(
        ErrorDetail(exc_type="KeyError", exc_module="builtins", message="k")
    )
    assert isinstance(builtin, KeyError) and not isinstance(builtin, chains.GenericRemoteException)


def test_a_failed_pip_step_leads_with_the_requirement_pip_could_not_find() -> None:
    tail = [
        "Step 5/9 : RUN pip install -r requirements.txt",
        " ---> Running in 0c1d2e3f",
        "Collecting pydantic>=2 (from -r requirements.txt (line 1))",
        "Collecting numpy==99.0 (from -r requirements.txt (line 2))",
        "ERROR: Could not find a version that satisfies the requirement numpy==99.0 (from versions: 1.0)",
        "ERROR: No matching distribution found for numpy==99.0",
    ]
    error = chains.BuildFailed(
        "Embedder", "The command '/bin/sh -c pip install' returned a non-zero code: 1", tail
    )
    first = str(error).splitlines()[0]
    assert first.startswith(
        "the image of chainlet Embedder did not build: No matching distribution found for numpy==99.0 (pip; "
    )
    assert "Collecting pydantic" in str(error)  # the log's tail still follows


def test_a_build_failure_pip_did_not_explain_keeps_the_engines_reason() -> None:
    error = chains.BuildFailed("Embedder", "no space left on device", ["Step 1/9 : FROM python:3.11-slim"])
    assert (
        str(error).splitlines()[0] == "the image of chainlet Embedder did not build: no space left on device"
    )
