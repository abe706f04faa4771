"""How one part of a stream (item, header or footer) becomes bytes and back, and what identifies
a stream's schema on the wire: :class:`PartCodec` and :class:`WireSchema`.

The fingerprint of a schema is built from :func:`schema_of` each part's type, normalized so
that editing a docstring on one side does not break a deployed peer. A reader built for another
schema is refused with :func:`schema_mismatch`.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Any, Final

import pydantic
import pydantic_core

from chains.errors import ChainsUsageError, StreamSchemaMismatch
from chains.streaming.framing import encode_preamble
from chains.wire import wire_adapter

__all__ = [
    "PartCodec",
    "WireSchema",
    "json_codec",
    "schema_mismatch",
    "schema_of",
    "short_repr",
    "type_name",
]


def type_name(tp: Any) -> str:
    """``Token``, ``int``, ``list[int]``: a type as a person writes it."""
    if isinstance(tp, type) and not typing.get_args(tp):
        return tp.__qualname__.rpartition("<locals>.")[2]
    return repr(tp).replace("typing.", "")


class PartCodec:
    """Serializes and parses one part of a stream; ``dump`` gives bytes, ``load`` takes bytes."""

    __slots__ = ("dump", "load", "name")

    def __init__(self, name: str, dump: Callable[[Any], bytes], load: Callable[[bytes], Any]) -> None:
        self.name = name
        self.dump = dump
        self.load = load


def json_codec(tp: Any, role: str) -> PartCodec:
    """A codec through pydantic, with a direct path for model instances of exactly ``tp``."""
    name = type_name(tp)
    adapter = wire_adapter(tp)

    def refuse(value: Any, exc: Exception) -> ChainsUsageError:
        return ChainsUsageError(
            f"the stream {role} must be a {name}, got {type(value).__name__} {short_repr(value)}: {exc}"
        )

    if isinstance(tp, type) and issubclass(tp, pydantic.BaseModel):
        # The model's own serializer and validator skip TypeAdapter's per-call overhead,
        # which is a large share of the cost for small items.
        to_json = tp.__pydantic_serializer__.to_json
        validate_python = tp.__pydantic_validator__.validate_python
        validate_json = tp.__pydantic_validator__.validate_json

        def dump_model(value: Any) -> bytes:
            if type(value) is tp:
                return to_json(value)
            try:
                return to_json(validate_python(value))
            except pydantic.ValidationError as exc:
                raise refuse(value, exc) from None

        return PartCodec(name, dump_model, validate_json)

    dump_json = adapter.dump_json
    validate_any = adapter.validate_python

    def dump(value: Any) -> bytes:
        try:
            return dump_json(validate_any(value))
        except (pydantic.ValidationError, pydantic_core.PydanticSerializationError) as exc:
            raise refuse(value, exc) from None

    return PartCodec(name, dump, adapter.validate_json)


def short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


_SCHEMA_NOISE: Final = frozenset({"description", "examples"})
_SCHEMA_MAPS: Final = frozenset(
    {"properties", "$defs", "definitions", "patternProperties", "dependentSchemas"}
)
_SCHEMA_DATA: Final = frozenset({"default", "const", "enum", "example"})


def _normalize_schema(node: Any) -> Any:
    """Drop what does not change the wire (docstrings, examples), so editing a docstring on one
    side does not break a deployed peer. Titles stay: a model's name is part of its schema.
    Keys of ``properties`` are field names, and values under ``default``/``const``/``enum``
    are data: those are kept as they are."""
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in _SCHEMA_NOISE:
                continue
            if key in _SCHEMA_MAPS and isinstance(value, dict):
                out[key] = {name: _normalize_schema(sub) for name, sub in value.items()}
            elif key in _SCHEMA_DATA:
                out[key] = value
            else:
                out[key] = _normalize_schema(value)
        return out
    if isinstance(node, list):
        return [_normalize_schema(item) for item in node]
    return node


def schema_of(tp: Any) -> Any:
    try:
        return _normalize_schema(wire_adapter(tp).json_schema(mode="validation"))
    except pydantic.PydanticUserError:
        # Serializable but without a JSON schema (a custom type): its name is the best we have.
        return {"python_type": type_name(tp)}


class WireSchema:
    """What a framed stream carries: its fingerprint, readable name and per-part codecs.

    :class:`StreamTypes` builds one for structured and item streams; text, bytes and SSE
    streams have built-in ones (see ``chains.streaming.kinds``).
    """

    __slots__ = ("fingerprint", "footer", "header", "item", "name", "preamble")

    def __init__(
        self,
        fingerprint: str,
        name: str,
        item: PartCodec,
        header: PartCodec | None = None,
        footer: PartCodec | None = None,
    ) -> None:
        self.fingerprint = fingerprint
        self.name = name
        self.item = item
        self.header = header
        self.footer = footer
        self.preamble = encode_preamble(fingerprint, name)

    def __repr__(self) -> str:
        return f"WireSchema({self.name}, fingerprint={self.fingerprint!r})"


class _SchemaMismatchValidationError(StreamSchemaMismatch, pydantic.ValidationError):
    """A StreamSchemaMismatch that is a ``pydantic.ValidationError`` too, as the error Truss
    Chains' readers raise for items of another model is: callers written for either catch it.

    It is raised only where it is made. Across hops it travels as a plain StreamSchemaMismatch
    (``ErrorDetail`` names a private class by its public base), because a rebuilt remote error
    is built from its class's C layout and pydantic's cannot be built from a message alone.
    """

    # pydantic builds its errors through from_exception_data, which calls the class with
    # these arguments (as unpickling does): the line errors are pydantic's own objects.
    def __new__(
        cls, title: str, line_errors: list[Any], input_type: str = "python", hide_input: bool = False
    ) -> _SchemaMismatchValidationError:
        return pydantic.ValidationError.__new__(cls, title, line_errors, input_type, hide_input)

    def __init__(
        self, title: str, line_errors: list[Any], input_type: str = "python", hide_input: bool = False
    ) -> None:
        StreamSchemaMismatch.__init__(self, title, line_errors, input_type, hide_input)

    def __str__(self) -> str:
        # chains' sentence (both schemas, both fingerprints and the fix), not pydantic's table.
        return str(self.errors()[0]["msg"])


def schema_mismatch(message: str, *, reader: str, producer: str, fingerprint: str) -> StreamSchemaMismatch:
    """The error for a stream whose preamble names another schema than the reader's:
    ``message`` says which and how to fix it. ``reader`` is the reader's schema name (the
    ValidationError's title), ``producer`` and ``fingerprint`` what the stream declared.

    >>> error = schema_mismatch("no", reader="Token", producer="Word", fingerprint="ab12")
    >>> isinstance(error, pydantic.ValidationError), str(error), error.errors()[0]["loc"]
    (True, 'no', ('preamble',))
    """
    line_error = pydantic_core.InitErrorDetails(
        # The message is passed as context, so that braces in a schema's name are not read as
        # placeholders of pydantic's template.
        type=pydantic_core.PydanticCustomError("stream_schema_mismatch", "{reason}", {"reason": message}),
        loc=("preamble",),
        input={"schema": producer, "fingerprint": fingerprint},
    )
    return _SchemaMismatchValidationError.from_exception_data(reader, [line_error])
