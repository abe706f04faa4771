"""What one endpoint streams: :class:`StreamShape`, its kind and (for typed streams) its
:class:`StreamTypes`, and :func:`shape_of` a checked endpoint."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from chains.errors import ChainsUsageError
from chains.streaming.kinds import BUILTIN_ITEMS, BUILTIN_WIRES, STREAM_KINDS, StreamKind
from chains.streaming.schema import WireSchema
from chains.streaming.types import StreamTypes, stream_types

__all__ = ["StreamShape", "shape_of"]


@dataclass(frozen=True)
class StreamShape:
    """What one endpoint streams: its kind, and for ``items``/``structured`` its StreamTypes.

    For ``items`` the StreamTypes is ``stream_types(T)`` (so an item stream of ``T`` and a
    structured stream of ``stream_types(T)`` are the same frames); text, bytes and SSE streams
    have the built-in fingerprints ``"text"``, ``"bytes"`` and ``"sse"``::

        >>> StreamShape.of("text").fingerprint
        'text'
        >>> StreamShape.of("items", item_type=int).types
        stream_types(int)
    """

    kind: StreamKind
    types: StreamTypes[Any, Any, Any] | None = None

    @classmethod
    def of(
        cls, kind: StreamKind, item_type: Any = None, types: StreamTypes[Any, Any, Any] | None = None
    ) -> StreamShape:
        """The shape of a ``kind`` stream: ``items`` needs ``item_type``, ``structured`` ``types``."""
        if kind not in STREAM_KINDS:
            raise ChainsUsageError(f"unknown stream kind {kind!r}; use one of {', '.join(STREAM_KINDS)}")
        if kind == "structured":
            if not isinstance(types, StreamTypes):
                raise ChainsUsageError(
                    "a structured stream shape needs its StreamTypes: StreamShape.of(kind, types=...)"
                )
            return cls(kind, types)
        if types is not None:
            raise ChainsUsageError(f"only a structured stream takes StreamTypes, not a {kind} stream")
        if kind == "items":
            if item_type is None:
                raise ChainsUsageError(
                    "an items stream shape needs its item type: StreamShape.of('items', item_type=T)"
                )
            return cls(kind, stream_types(item_type))
        if item_type is not None and item_type is not BUILTIN_ITEMS[kind]:
            raise ChainsUsageError(
                f"a {kind} stream yields {BUILTIN_ITEMS[kind].__name__}, not {item_type!r}; "
                "use kind='items' for other item types"
            )
        return cls(kind)

    @classmethod
    def for_item_type(cls, item_type: Any, types: StreamTypes[Any, Any, Any] | None = None) -> StreamShape:
        """The shape for a generator yielding ``item_type`` (``bytes`` with ``types``: structured)."""
        if types is not None:
            return cls.of("structured", types=types)
        for kind, builtin in BUILTIN_ITEMS.items():
            if item_type is builtin:
                return cls.of(kind)
        return cls.of("items", item_type=item_type)

    @property
    def wire(self) -> WireSchema:
        """The fingerprint, preamble and codecs the framed form uses."""
        if self.types is not None:
            return self.types.wire
        return BUILTIN_WIRES[self.kind]

    @property
    def fingerprint(self) -> str:
        return self.wire.fingerprint

    @property
    def item_type(self) -> Any:
        """What a consumer of the decoded stream gets: str, bytes, SSE, T, or bytes (structured)."""
        if self.kind == "items" and self.types is not None:
            return self.types.item_type
        return BUILTIN_ITEMS.get(self.kind, bytes)

    def __repr__(self) -> str:
        return f"StreamShape({self.kind!r}, {self.wire.name})"


class _EndpointLike(Protocol):
    @property
    def output_kind(self) -> str: ...
    @property
    def output_type(self) -> Any: ...
    @property
    def stream_types(self) -> StreamTypes[Any, Any, Any] | None: ...


_SHAPES: dict[tuple[str, Any, Any], StreamShape] = {}


def shape_of(endpoint: _EndpointLike) -> StreamShape:
    """The shape of a checked endpoint's stream (anything with ``output_kind``,
    ``output_type`` and ``stream_types``, such as ``chains.endpoint.EndpointSpec``); cached."""
    kind = endpoint.output_kind
    key = (kind, endpoint.output_type, endpoint.stream_types)
    try:
        return _SHAPES[key]
    except KeyError:
        shape = _build_shape(kind, endpoint.output_type, endpoint.stream_types)
        _SHAPES[key] = shape
        return shape
    except TypeError:  # unhashable type metadata: build it every time
        return _build_shape(kind, endpoint.output_type, endpoint.stream_types)


def _build_shape(kind: str, output_type: Any, types: StreamTypes[Any, Any, Any] | None) -> StreamShape:
    if kind == "structured":
        return StreamShape.of("structured", types=types)
    if kind == "items":
        return StreamShape.of("items", item_type=output_type)
    if kind == "text":
        return StreamShape.of("text")
    if kind == "bytes":
        return StreamShape.of("bytes")
    if kind == "sse":
        return StreamShape.of("sse")
    raise ChainsUsageError(
        f"the endpoint's output is {kind!r}, not a stream; only streaming endpoints have a shape"
    )
