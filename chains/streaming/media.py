"""The media types of a stream's forms on HTTP."""

from __future__ import annotations

from typing import Final

__all__ = [
    "BYTES_MEDIA_TYPE",
    "FRAMED_MEDIA_TYPE",
    "NDJSON_MEDIA_TYPE",
    "SSE_MEDIA_TYPE",
    "TEXT_MEDIA_TYPE",
]


FRAMED_MEDIA_TYPE: Final = "application/x-chains-stream"
SSE_MEDIA_TYPE: Final = "text/event-stream"
TEXT_MEDIA_TYPE: Final = "text/plain; charset=utf-8"
BYTES_MEDIA_TYPE: Final = "application/octet-stream"
NDJSON_MEDIA_TYPE: Final = "application/x-ndjson"
