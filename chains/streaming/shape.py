"""What one endpoint streams: :class:`StreamShape`, its kind and (for typed streams) its
:class:`StreamTypes`, and :func:`shape_of` a checked endpoint."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from chains.errors import ChainsUsageError
from chains.streaming.kinds import OutputKind, StreamKind, stream_kind_for
from chains.streaming.schema import WireSchema
from chains.streaming.types import StreamTypes

__all__ = ["StreamShape", "shape_of"]


@dataclass(frozen=True)
class StreamShape:
    """What one endpoint streams: its kind, and for ``items``/``structured`` its StreamTypes.

    For ``items`` the StreamTypes is ``stream_types(T)`` (so an item stream of ``T`` and a
    structured stream of ``stream_types(T)`` are the same frames); text, bytes and SSE streams
    have the built-in fingerprints ``"text"``, ``"bytes"`` and ``"sse"``::

        >>> from chains.streaming.kinds import ITEMS, TEXT
        >>> StreamShape.of(TEXT).fingerprint
        'text'
        >>> StreamShape.of(ITEMS, item_type=int).types
        stream_types(int)
    """

    kind: StreamKind
    types: StreamTypes[Any, Any, Any] | None = None

    @classmethod
    def of(
        cls, kind: StreamKind, item_type: Any = None, types: StreamTypes[Any, Any, Any] | None = None
    ) -> StreamShape:
        """The shape of a ``kind`` stream: ``ITEMS`` needs ``item_type``, ``STRUCTURED`` ``types``."""
        if not isinstance(kind, StreamKind):
            raise ChainsUsageError(
                f"StreamShape.of() takes a stream kind from chains.streaming.kinds, got {kind!r}"
            )
        return cls(kind, kind.stream_types_for(item_type, types))

    @classmethod
    def for_item_type(cls, item_type: Any, types: StreamTypes[Any, Any, Any] | None = None) -> StreamShape:
        """The shape for a generator yielding ``item_type`` (``bytes`` with ``types``: structured)."""
        return cls.of(stream_kind_for(item_type, types), item_type=item_type, types=types)

    @property
    def wire(self) -> WireSchema:
        """The fingerprint, preamble and codecs the framed form uses."""
        return self.kind.wire(self.types)

    @property
    def fingerprint(self) -> str:
        return self.wire.fingerprint

    @property
    def item_type(self) -> Any:
        """What a consumer of the decoded stream gets: str, bytes, SSE, T, or bytes (structured)."""
        return self.kind.decoded_type(self.types)

    def __repr__(self) -> str:
        return f"StreamShape({self.kind.name!r}, {self.wire.name})"


class _EndpointLike(Protocol):
    @property
    def output_kind(self) -> OutputKind: ...
    @property
    def output_type(self) -> Any: ...
    @property
    def stream_types(self) -> StreamTypes[Any, Any, Any] | None: ...


_SHAPES: dict[tuple[OutputKind, Any, Any], StreamShape] = {}


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


def _build_shape(kind: OutputKind, output_type: Any, types: StreamTypes[Any, Any, Any] | None) -> StreamShape:
    if not isinstance(kind, StreamKind):
        raise ChainsUsageError(
            f"the endpoint's output is {kind.name!r}, not a stream; only streaming endpoints have a shape"
        )
    return StreamShape.of(kind, item_type=output_type, types=types)
