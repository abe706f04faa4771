"""The JSON wire codec of a unary call: arguments out and in, result out and in.

Stubs, servers and ``run_local`` use these same four functions, so a value that would not
survive the wire fails in a local test exactly as it would in a deployed chain.
"""

from __future__ import annotations

from typing import Any

import pydantic

from chains.endpoint import EndpointSpec, field_name
from chains.errors import ErrorDetail, RemoteError

__all__ = [
    "bind_arguments",
    "decode_args",
    "decode_result",
    "encode_args",
    "encode_result",
    "invalid_arguments",
]


def bind_arguments(spec: EndpointSpec, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Map a stub call's positional and keyword arguments to parameter names."""
    try:
        bound = spec.signature.bind(None, *args, **kwargs)
    except TypeError as exc:
        raise TypeError(f"{spec.chainlet}.run_remote(): {exc}") from None
    arguments = dict(bound.arguments)
    arguments.pop(next(iter(spec.signature.parameters)), None)  # the `self` placeholder
    return arguments


def encode_args(spec: EndpointSpec, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
    """The request body for a call; a value the parameter type refuses raises ValidationError."""
    model = spec.input_model.model_validate(bind_arguments(spec, args, kwargs))
    return type(model).__pydantic_serializer__.to_json(model, by_alias=True)


def decode_args(spec: EndpointSpec, body: bytes | str) -> dict[str, Any]:
    """The keyword arguments for ``run_remote`` from a request body (raises ValidationError)."""
    model = spec.input_model.model_validate_json(body)
    return {p.name: getattr(model, field_name(p.name)) for p in spec.params}


def encode_result(spec: EndpointSpec, value: Any) -> bytes:
    """The response body for a unary result; a value of the wrong type raises ValidationError."""
    adapter = spec.output_adapter
    return adapter.dump_json(adapter.validate_python(value))


def decode_result(spec: EndpointSpec, body: bytes | str) -> Any:
    """The caller's value from a response body."""
    return spec.output_adapter.validate_json(body)


def invalid_arguments(spec: EndpointSpec, exc: pydantic.ValidationError) -> RemoteError:
    """What a caller raises when the callee refused its arguments (HTTP 422 on the wire).

    It is a ``ValueError``, as pydantic's own error is, and lists each refused field.
    """
    return RemoteError.from_detail(invalid_arguments_detail(spec.chainlet, exc.errors(include_url=False)))


def invalid_arguments_detail(chainlet: str, errors: list[Any]) -> ErrorDetail:
    lines = []
    for error in errors:
        location = ".".join(str(part) for part in error.get("loc", ())) or "(body)"
        lines.append(f"{location}: {error.get('msg', 'invalid')}")
    message = f"invalid arguments for {chainlet}.run_remote: " + "; ".join(lines)
    return ErrorDetail(exc_type="ValueError", exc_module="builtins", message=message, chainlet=chainlet)
