"""The types of a structured stream, shared by its producer and its consumers:
:class:`StreamTypes`, built with :func:`stream_types`."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Generic, TypeVar, overload

import pydantic

from chains.errors import ChainsUsageError
from chains.streaming.schema import PartCodec, WireSchema, json_codec, schema_of, type_name

__all__ = ["StreamTypes", "stream_types"]

ItemT = TypeVar("ItemT")
HeaderT = TypeVar("HeaderT")
FooterT = TypeVar("FooterT")


@dataclass(frozen=True)
class StreamTypes(Generic[ItemT, HeaderT, FooterT]):
    """The types of a structured stream: its items, and optionally a header and a footer.

    Build it with :func:`stream_types`, once, in a module both producer and consumer import.
    It is frozen and hashable, and two StreamTypes of the same types are equal. Its
    ``fingerprint`` identifies the JSON schemas of the parts and travels ahead of the first
    item, so a consumer built for other types fails clearly instead of misreading the data::

        >>> import pydantic
        >>> class Token(pydantic.BaseModel):
        ...     text: str
        >>> TOKENS = stream_types(Token)
        >>> TOKENS == stream_types(Token), len(TOKENS.fingerprint)
        (True, 32)
    """

    item_type: Any
    header_type: Any = None
    footer_type: Any = None

    def __post_init__(self) -> None:
        # Build the codecs now, so an unserializable type fails where the stream is declared.
        _ = self.wire

    def __repr__(self) -> str:
        parts = [type_name(self.item_type)]
        if self.header_type is not None:
            parts.append(f"header_type={type_name(self.header_type)}")
        if self.footer_type is not None:
            parts.append(f"footer_type={type_name(self.footer_type)}")
        return f"stream_types({', '.join(parts)})"

    @cached_property
    def fingerprint(self) -> str:
        """A stable digest of the item, header and footer schemas (32 hex characters).

        It is the same in every process and on every machine for the same types; renaming a
        field or changing its type changes it, editing a docstring does not.
        """
        parts = {
            "item": schema_of(self.item_type),
            "header": None if self.header_type is None else schema_of(self.header_type),
            "footer": None if self.footer_type is None else schema_of(self.footer_type),
        }
        canonical = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        return hashlib.sha256(canonical.encode()).hexdigest()[:32]

    @cached_property
    def wire(self) -> WireSchema:
        """The codecs and preamble this stream uses on the wire (built once per types, then cached)."""
        try:
            cached = _WIRES.get(self)
        except TypeError:  # a type form with unhashable metadata
            return self._build_wire()
        if cached is None:
            cached = _WIRES[self] = self._build_wire()
        return cached

    def _build_wire(self) -> WireSchema:
        codecs: dict[str, PartCodec | None] = {}
        for role, tp in (
            ("item", self.item_type),
            ("header", self.header_type),
            ("footer", self.footer_type),
        ):
            if tp is None and role != "item":
                codecs[role] = None
                continue
            try:
                codecs[role] = json_codec(tp, role)
            except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticUserError, TypeError) as exc:
                reason = str(exc).strip().split("\n", 1)[0]
                raise ChainsUsageError(
                    f"stream_types(): the {role} type {type_name(tp)} cannot be sent over the wire "
                    f"({reason}); use JSON-compatible types or pydantic models"
                ) from None
        item = codecs["item"]
        assert item is not None
        return WireSchema(self.fingerprint, repr(self), item, codecs["header"], codecs["footer"])


# Equal StreamTypes share their codecs: building pydantic adapters is the expensive part, and
# the server and run_local build a StreamTypes per call for item streams.
_WIRES: dict[StreamTypes[Any, Any, Any], WireSchema] = {}


@overload
def stream_types(
    item_type: type[ItemT], *, header_type: None = None, footer_type: None = None
) -> StreamTypes[ItemT, None, None]: ...
@overload
def stream_types(
    item_type: type[ItemT], *, header_type: type[HeaderT], footer_type: None = None
) -> StreamTypes[ItemT, HeaderT, None]: ...
@overload
def stream_types(
    item_type: type[ItemT], *, header_type: None = None, footer_type: type[FooterT]
) -> StreamTypes[ItemT, None, FooterT]: ...
@overload
def stream_types(
    item_type: type[ItemT], *, header_type: type[HeaderT], footer_type: type[FooterT]
) -> StreamTypes[ItemT, HeaderT, FooterT]: ...
# A type form that is not a class (`int | None`, `Literal[...]`): items are typed Any.
@overload
def stream_types(
    item_type: object, *, header_type: None = None, footer_type: None = None
) -> StreamTypes[Any, None, None]: ...
@overload
def stream_types(
    item_type: object, *, header_type: type[HeaderT], footer_type: None = None
) -> StreamTypes[Any, HeaderT, None]: ...
@overload
def stream_types(
    item_type: object, *, header_type: None = None, footer_type: type[FooterT]
) -> StreamTypes[Any, None, FooterT]: ...
@overload
def stream_types(
    item_type: object, *, header_type: type[HeaderT], footer_type: type[FooterT]
) -> StreamTypes[Any, HeaderT, FooterT]: ...
def stream_types(
    item_type: Any, *, header_type: Any = None, footer_type: Any = None
) -> StreamTypes[Any, Any, Any]:
    """Declare the types of a structured stream, shared by its producer and its consumers.

    ``item_type`` is any serializable type (a pydantic model, ``int``, ``list[str]``, ...);
    ``header_type`` and ``footer_type`` are optional, and a writer or reader of the result only
    has ``yield_header``/``read_header`` (``yield_footer``/``read_footer``) when they are given::

        TOKENS = chains.stream_types(Token, footer_type=Usage)

        async def run_remote(self, prompt: str) -> Annotated[AsyncIterator[bytes], TOKENS]:
            writer = chains.stream_writer(TOKENS)
            yield writer.yield_item(Token(text="hi"))
            yield writer.yield_footer(Usage(tokens=1))
    """
    for role, tp in (("item_type", item_type), ("header_type", header_type), ("footer_type", footer_type)):
        if isinstance(tp, StreamTypes):
            raise ChainsUsageError(
                f"stream_types(): {role} is already a StreamTypes ({tp!r}); pass the types"
            )
    if item_type is None:
        raise ChainsUsageError("stream_types(): item_type is required, e.g. stream_types(Token)")
    return StreamTypes(item_type, header_type, footer_type)
