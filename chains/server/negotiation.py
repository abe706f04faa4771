"""HTTP content negotiation of a streaming response: which form a request's ``Accept`` asks for."""

from __future__ import annotations

from typing import NamedTuple

from chains.streaming.forms import encode_framed, encode_raw, encode_sse, raw_media_type
from chains.streaming.forms.producer import StreamEncoder
from chains.streaming.shape import StreamShape
from chains.wire import FRAMED_MEDIA_TYPE, SSE_MEDIA_TYPE

__all__ = ["Negotiated", "negotiate"]


class Negotiated(NamedTuple):
    """The outcome of :func:`negotiate`: the Content-Type to send and the encoder to use."""

    media_type: str
    encoder: StreamEncoder


def _accepted(header: str) -> list[tuple[str, str, float]]:
    ranges: list[tuple[str, str, float]] = []
    for part in header.split(","):
        media, *params = part.split(";")
        media = media.strip().lower()
        if media == "*":
            media = "*/*"
        main, slash, sub = media.partition("/")
        if not slash or not main or not sub:
            continue
        quality = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    quality = min(max(float(value.strip()), 0.0), 1.0)
                except ValueError:
                    quality = -1.0  # a malformed range is ignored
        if quality >= 0:
            ranges.append((main, sub, quality))
    return ranges


def _quality(media_type: str, ranges: list[tuple[str, str, float]]) -> tuple[float, int]:
    """The quality the client gives ``media_type``, from its most specific matching range."""
    main, _, sub = media_type.split(";")[0].strip().partition("/")
    best_specificity, best_quality = -1, 0.0
    for range_main, range_sub, quality in ranges:
        if range_main == main and range_sub == sub:
            specificity = 2
        elif range_main == main and range_sub == "*":
            specificity = 1
        elif range_main == "*" and range_sub == "*":
            specificity = 0
        else:
            continue
        if specificity > best_specificity:
            best_specificity, best_quality = specificity, quality
    return best_quality, best_specificity


def negotiate(accept_header: str | None, shape: StreamShape) -> Negotiated:
    """Pick the stream's form for a request's ``Accept`` header.

    ``application/x-chains-stream`` gives the framed form, ``text/event-stream`` SSE, and
    anything else the raw form of the kind (``text/plain; charset=utf-8``,
    ``application/octet-stream``, NDJSON). The highest quality value wins; at equal quality
    an exact media type beats ``type/*``, which beats ``*/*``; remaining ties prefer raw,
    then SSE, then framed, so ``curl`` (``*/*``) sees plain tokens. No header, or a header
    that accepts none of the forms, gives raw (RFC 9110 lets a server disregard Accept
    rather than answer 406). An SSE stream has no separate raw form for an Accept header:
    ``*/*`` or ``text/event-stream`` give its events followed by ``event: end``; raw (events
    only) is for requests without Accept::

        >>> from chains.streaming.kinds import TEXT
        >>> negotiate("application/x-chains-stream", StreamShape.of(TEXT)).media_type
        'application/x-chains-stream'
        >>> negotiate("*/*", StreamShape.of(TEXT)).media_type
        'text/plain; charset=utf-8'
    """
    raw = Negotiated(raw_media_type(shape), encode_raw)
    if accept_header is None or not accept_header.strip():
        return raw
    ranges = _accepted(accept_header)
    candidates: list[tuple[float, int, int, Negotiated]] = []
    names = shape.kind.accepted_raw_types
    if names:  # none when the raw form is one of the others (an SSE stream's)
        quality, specificity = max(_quality(name, ranges) for name in names)
        candidates.append((quality, specificity, 3, raw))
    quality, specificity = _quality(SSE_MEDIA_TYPE, ranges)
    candidates.append((quality, specificity, 2, Negotiated(SSE_MEDIA_TYPE, encode_sse)))
    quality, specificity = _quality(FRAMED_MEDIA_TYPE, ranges)
    candidates.append((quality, specificity, 1, Negotiated(FRAMED_MEDIA_TYPE, encode_framed)))
    best = max(candidates, key=lambda c: c[:3])
    if best[0] <= 0:
        return raw
    return best[3]
