"""The wire codec of a unary call: arguments out and in, result out and in.

Stubs, servers and ``run_local`` use these same four functions, so a value that would not
survive the wire fails in a local test exactly as it would in a deployed chain.

JSON is the default. ``binary=True`` (``chains.depends(..., use_binary=True)``) sends
MessagePack instead: ``bytes`` travel as they are, without base64, which matters for
payloads such as audio or images.
"""

from __future__ import annotations

import weakref
from typing import Any, NamedTuple

import msgpack
import pydantic
import pydantic_core

from chains import call_policy
from chains.endpoint import EndpointSpec, field_name
from chains.errors import ErrorDetail, RemoteError
from chains.wire import BINARY_CONTEXT, BINARY_MEDIA_TYPE

__all__ = [
    "BINARY_MEDIA_TYPE",
    "bind_arguments",
    "decode_args",
    "decode_payload",
    "decode_result",
    "encode_args",
    "encode_payload",
    "encode_result",
    "invalid_arguments",
]


class _Names(NamedTuple):
    """What an endpoint's parameters are called, worked out once per endpoint."""

    keywords: frozenset[str]  # the parameters that can be passed by name
    required: frozenset[str]
    fields: tuple[tuple[str, str], ...]  # (parameter, its field in the input model)


# By input model, which each endpoint makes once: a field name costs a failed hasattr on
# BaseModel, and binding a signature about 3 µs, on every call otherwise.
_NAMES: weakref.WeakKeyDictionary[type[pydantic.BaseModel], _Names] = weakref.WeakKeyDictionary()


def _names(spec: EndpointSpec) -> _Names:
    model = spec.input_model
    names = _NAMES.get(model)
    if names is None:
        names = _NAMES[model] = _Names(
            keywords=frozenset(p.name for p in spec.params if not p.positional_only),
            required=frozenset(p.name for p in spec.params if p.required),
            fields=tuple((p.name, field_name(p.name)) for p in spec.params),
        )
    return names


def bind_arguments(spec: EndpointSpec, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Map a stub call's positional and keyword arguments to parameter names."""
    if not args:
        # What generated stubs do: every argument by name. Anything else (an unknown or a
        # missing name) goes through the signature, which says what is wrong.
        names = _names(spec)
        if names.required <= kwargs.keys() <= names.keywords:
            return dict(kwargs)
    try:
        bound = spec.signature.bind(None, *args, **kwargs)
    except TypeError as exc:
        raise TypeError(f"{spec.chainlet}.run_remote(): {exc}") from None
    arguments = dict(bound.arguments)
    arguments.pop(next(iter(spec.signature.parameters)), None)  # the `self` placeholder
    return arguments


def _pack(value: Any) -> bytes:
    # MessagePack has no dates, UUIDs, decimals or enums: those go as their JSON form, which
    # validation on the other side turns back into the declared type.
    packed: bytes = msgpack.packb(value, default=pydantic_core.to_jsonable_python, use_bin_type=True)
    return packed


def _unpack(body: bytes | str) -> Any:
    data = body.encode() if isinstance(body, str) else body
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False)
    except (ValueError, msgpack.UnpackException) as exc:
        raise pydantic.ValidationError.from_exception_data(
            "MessagePack body",
            [
                {
                    "type": "value_error",
                    "loc": (),
                    "input": None,
                    "ctx": {"error": f"not MessagePack ({type(exc).__name__})"},
                }
            ],
        ) from None


def encode_args(
    spec: EndpointSpec, args: tuple[Any, ...], kwargs: dict[str, Any], *, binary: bool = False
) -> bytes:
    """The request body for a call; a value the parameter type refuses raises ValidationError."""
    model = spec.input_model.model_validate(bind_arguments(spec, args, kwargs))
    if binary:
        return _pack(model.model_dump(mode="python", by_alias=True, context=BINARY_CONTEXT))
    return type(model).__pydantic_serializer__.to_json(model, by_alias=True)


def decode_args(spec: EndpointSpec, body: bytes | str, *, binary: bool = False) -> dict[str, Any]:
    """The keyword arguments for ``run_remote`` from a request body (raises ValidationError)."""
    if binary:
        model = spec.input_model.model_validate(_unpack(body))
    else:
        _refuse_non_finite(body)
        model = spec.input_model.model_validate_json(body)
    return {name: getattr(model, field) for name, field in _names(spec).fields}


def _refuse_non_finite(body: bytes | str) -> None:
    """Refuse the JSON5 words ``NaN`` and ``Infinity`` anywhere in a body, not only where a
    parameter is a float: in an ``Any`` field, or a model of the user's own (whose config
    allows them), they would be written as null to the next hop. The words are looked for
    first, so that a body without them (nearly all) is not parsed twice."""
    data = body.encode() if isinstance(body, str) else body
    if b"NaN" not in data and b"Infinity" not in data:
        return
    try:
        pydantic_core.from_json(data, allow_inf_nan=False)
    except ValueError as exc:
        try:
            pydantic_core.from_json(data)
        except ValueError:
            return  # malformed some other way too: the model's own parse says how
        raise pydantic.ValidationError.from_exception_data(
            "JSON body",
            [
                {
                    "type": "value_error",
                    "loc": (),
                    "input": None,
                    "ctx": {
                        "error": "NaN and Infinity are not JSON and would not arrive as sent: "
                        f"send finite numbers ({exc})"
                    },
                }
            ],
        ) from None


def encode_result(spec: EndpointSpec, value: Any, *, binary: bool = False) -> bytes:
    """The response body for a unary result; a value of the wrong type raises ValidationError."""
    adapter = spec.output_adapter
    checked = adapter.validate_python(value)
    try:
        if binary:
            return _pack(adapter.dump_python(checked, mode="python", context=BINARY_CONTEXT))
        return adapter.dump_json(checked)
    except pydantic_core.PydanticSerializationError as exc:
        raise pydantic_core.PydanticSerializationError(_unserializable(spec, checked, exc)) from None


def _unserializable(spec: EndpointSpec, value: Any, exc: Exception) -> str:
    """Which part of a result could not be serialized, named for the person who returned it:
    pydantic's own message names the type but not where the value sits."""
    found = _first_unserializable(value, "result", depth=0)
    where = f"{found[0]} is a {type(found[1]).__module__}.{type(found[1]).__qualname__}: " if found else ""
    return (
        f"{spec.chainlet}.run_remote returned a value that cannot be serialized: {where}{exc}; return "
        "only values JSON (or MessagePack) can carry, e.g. a list instead of an array, or "
        "declare the field with a serializable type"
    )


def _first_unserializable(value: Any, path: str, depth: int) -> tuple[str, Any] | None:
    if depth > 50:
        return None
    children: list[tuple[str, Any]]
    if isinstance(value, dict):
        children = [(f"{path}[{key!r}]", item) for key, item in value.items()]
    elif isinstance(value, list | tuple | set | frozenset):
        children = [(f"{path}[{index}]", item) for index, item in enumerate(value)]
    elif isinstance(value, pydantic.BaseModel):
        children = [(f"{path}.{name}", getattr(value, name, None)) for name in type(value).model_fields]
    else:
        try:
            pydantic_core.to_json(value)
        except pydantic_core.PydanticSerializationError:
            return path, value
        return None
    for child_path, child in children:
        found = _first_unserializable(child, child_path, depth + 1)
        if found is not None:
            return found
    return None


def decode_result(spec: EndpointSpec, body: bytes | str, *, binary: bool = False) -> Any:
    """The caller's value from a response body."""
    if binary:
        return spec.output_adapter.validate_python(_unpack(body))
    return spec.output_adapter.validate_json(body)


def encode_payload(value: Any, *, binary: bool = False) -> bytes:
    """The body of a call to a deployed model: a pydantic model, or any JSON-able value."""
    if isinstance(value, pydantic.BaseModel):
        if binary:
            return _pack(value.model_dump(mode="python", by_alias=True, context=BINARY_CONTEXT))
        return type(value).__pydantic_serializer__.to_json(value, by_alias=True)
    if binary:
        return _pack(value)
    return pydantic_core.to_json(value)


def decode_payload(body: bytes, model: type[Any] | None = None, *, binary: bool = False) -> Any:
    """A deployed model's answer: plain data, or validated into ``model`` (raises ValidationError)."""
    adapter = _ANY if model is None else _adapter(model)
    return adapter.validate_python(_unpack(body)) if binary else adapter.validate_json(body)


_ANY: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(Any)
_adapters: weakref.WeakKeyDictionary[type[Any], pydantic.TypeAdapter[Any]] = weakref.WeakKeyDictionary()


def _adapter(model: type[Any]) -> pydantic.TypeAdapter[Any]:
    adapter = _adapters.get(model)
    if adapter is None:
        adapter = _adapters[model] = pydantic.TypeAdapter(model)
    return adapter


def invalid_arguments(spec: EndpointSpec, exc: pydantic.ValidationError) -> RemoteError:
    """What a caller raises when the callee refused its arguments (HTTP 422 on the wire).

    It is a ``ValueError``, as pydantic's own error is, and lists each refused field.
    """
    return RemoteError.from_detail(invalid_arguments_detail(spec.chainlet, exc.errors(include_url=False)))


def invalid_arguments_detail(chainlet: str, errors: list[Any]) -> ErrorDetail:
    return call_policy.invalid_arguments(chainlet, errors)  # the one mapping every caller shares
