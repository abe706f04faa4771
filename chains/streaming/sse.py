"""Server-sent events: :class:`SSE` values, their wire text, and a chunk-safe parser.

An endpoint may stream ``SSE`` objects (``AsyncIterator[chains.SSE]``); a browser's
``EventSource`` or any SSE client reads them from the ``text/event-stream`` form of the
endpoint. :meth:`SSE.from_chunks` parses event-stream text the way a browser does, following
the WHATWG HTML "event stream interpretation" rules, from chunks split anywhere::

    >>> SSE("line 1\\nline 2", event="note", id="7").encode()
    'event: note\\nid: 7\\ndata: line 1\\ndata: line 2\\n\\n'
    >>> decoder = SSEDecoder()
    >>> decoder.feed(b"data: hel")
    []
    >>> decoder.feed(b"lo\\r\\n\\r\\n")
    [SSE(data='hello', event=None, id=None, retry=None)]
"""

from __future__ import annotations

import codecs
import re
from collections.abc import AsyncIterable, AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Final

from chains.errors import ChainsUsageError

__all__ = ["END_EVENT", "SSE", "SSEDecoder", "data_event"]

_LINE_BREAK: Final = re.compile(r"\r\n|\r|\n")
_BOM: Final = "\ufeff"

END_EVENT: Final = b"event: end\ndata: \n\n"
"""The event that ends a chains stream in its SSE form, so an ``EventSource`` closes rather
than reconnects."""


def data_event(data: bytes, event: bytes = b"") -> bytes:
    """One event whose data is ``data`` (a single line), named by ``event`` (``b"event: x\\n"``)."""
    # JSON from pydantic or json.dumps has no raw line breaks, so it is a single data line.
    return event + b"data: " + data + b"\n\n"


@dataclass(frozen=True, slots=True)
class SSE:
    """One server-sent event.

    ``data`` is the event's text (line breaks in it become several ``data:`` lines and come
    back as ``\\n``); ``event`` its type (``None`` is the default ``message``); ``id`` the last
    event id; ``retry`` a reconnection delay in milliseconds::

        async def run_remote(self, n: int) -> AsyncIterator[chains.SSE]:
            for i in range(n):
                yield chains.SSE(f"tick {i}", event="tick", id=str(i))

    Parsed events carry the stream's *last event id* as a browser reports it (an event
    without an ``id:`` line keeps the previous one), and the ``retry`` value given in that
    event's own lines.
    """

    data: str
    event: str | None = None
    id: str | None = None
    retry: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.data, str):
            raise ChainsUsageError(
                f"SSE data must be a str, got {type(self.data).__name__}; serialize it first, "
                "e.g. SSE(model.model_dump_json())"
            )
        for name, value in (("event", self.event), ("id", self.id)):
            if value is None:
                continue
            if not isinstance(value, str):
                raise ChainsUsageError(f"SSE {name} must be a str or None, got {type(value).__name__}")
            if "\n" in value or "\r" in value:
                raise ChainsUsageError(f"SSE {name} cannot contain a line break, got {value!r}")
        if self.id is not None and "\0" in self.id:
            raise ChainsUsageError(f"SSE id cannot contain NUL (clients ignore such ids), got {self.id!r}")
        if self.retry is not None and (
            not isinstance(self.retry, int) or isinstance(self.retry, bool) or self.retry < 0
        ):
            raise ChainsUsageError(f"SSE retry is a delay in milliseconds (an int >= 0), got {self.retry!r}")

    def encode(self) -> str:
        """The event's wire text, ending with the blank line that dispatches it.

        There is always at least one ``data:`` line, so an event with empty data is still
        delivered (a client drops events without data).
        """
        parts: list[str] = []
        if self.event is not None:
            parts.append(f"event: {self.event}\n")
        if self.id is not None:
            parts.append(f"id: {self.id}\n")
        if self.retry is not None:
            parts.append(f"retry: {self.retry}\n")
        # The space after "data:" is the one a parser strips, so data starting with a space
        # keeps it.
        for line in _LINE_BREAK.split(self.data):
            parts.append(f"data: {line}\n")
        parts.append("\n")
        return "".join(parts)

    @classmethod
    async def from_chunks(
        cls, chunks: AsyncIterable[str] | AsyncIterable[bytes] | Iterable[str] | Iterable[bytes]
    ) -> AsyncIterator[SSE]:
        """The events in event-stream text arriving as ``str`` or ``bytes`` chunks.

        Chunks may be split anywhere, inside a line, a CRLF pair or a UTF-8 character. An
        event is dispatched at its blank line; a last event without one is dropped, as a
        browser does when the connection closes::

            async for event in chains.SSE.from_chunks(response.aiter_bytes()):
                print(event.event, event.data)
        """
        decoder = SSEDecoder()
        if isinstance(chunks, AsyncIterable):
            async for chunk in chunks:
                for event in decoder.feed(chunk):
                    yield event
        else:
            for chunk in chunks:
                for event in decoder.feed(chunk):
                    yield event


class SSEDecoder:
    """Incremental event-stream parser: feed chunks, get the events they complete.

    Follows the WHATWG rules: lines end with CRLF, CR or LF; a line starting with ``:`` is a
    comment; ``field: value`` with one leading space stripped from the value, and a line
    without a colon is a field with an empty value; ``data`` lines accumulate (joined with
    ``\\n``), ``event`` sets the type, ``id`` (unless it contains NUL) the last event id,
    ``retry`` (digits only) the reconnection delay; unknown fields are ignored; a blank line
    dispatches the event if it has data. Bytes are decoded as UTF-8 (invalid sequences become
    U+FFFD), and one byte-order mark at the very start is skipped.
    """

    __slots__ = (
        "_data",
        "_event",
        "_last_id",
        "_mode",
        "_pending",
        "_retry",
        "_skip_lf",
        "_started",
        "_utf8",
    )

    def __init__(self) -> None:
        self._mode: type | None = None  # str or bytes, fixed by the first chunk
        self._utf8 = codecs.getincrementaldecoder("utf-8-sig")(errors="replace")
        self._started = False  # a leading BOM was looked for (str input)
        self._pending: list[str] = []  # pieces of the line in progress
        self._skip_lf = False  # the last chunk ended with CR: an LF right after it is the same break
        self._data: list[str] = []
        self._event = ""
        self._last_id = ""
        self._retry: int | None = None

    def feed(self, chunk: str | bytes | bytearray | memoryview) -> list[SSE]:
        """Parse one more chunk; returns the events dispatched by it, in order."""
        if isinstance(chunk, str):
            if self._mode is bytes:
                raise ChainsUsageError("SSE parser: got a str chunk after bytes chunks; feed one kind only")
            self._mode = str
            text = chunk
            if not self._started and text:
                self._started = True
                if text[0] == _BOM:
                    text = text[1:]
        elif isinstance(chunk, bytes | bytearray | memoryview):
            if self._mode is str:
                raise ChainsUsageError("SSE parser: got a bytes chunk after str chunks; feed one kind only")
            self._mode = bytes
            text = self._utf8.decode(chunk)
        else:
            raise ChainsUsageError(f"SSE parser takes str or bytes chunks, got {type(chunk).__name__}")
        events: list[SSE] = []
        self._feed_text(text, events)
        return events

    def _feed_text(self, text: str, events: list[SSE]) -> None:
        if not text:
            return
        if self._skip_lf:
            self._skip_lf = False
            if text[0] == "\n":
                text = text[1:]
        if "\r" in text:
            if text[-1] == "\r":
                self._skip_lf = True
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        lines = text.split("\n")
        if len(lines) == 1:
            self._pending.append(text)
            return
        pending = self._pending
        first = lines[0]
        if pending:
            pending.append(first)
            first = "".join(pending)
            pending.clear()
        self._line(first, events)
        for index in range(1, len(lines) - 1):
            self._line(lines[index], events)
        if lines[-1]:
            pending.append(lines[-1])

    def _line(self, line: str, events: list[SSE]) -> None:
        if not line:
            self._dispatch(events)
            return
        if line[0] == ":":
            return  # a comment, often sent as a keep-alive
        colon = line.find(":")
        if colon < 0:
            name, value = line, ""
        else:
            name, value = line[:colon], line[colon + 1 :]
            if value[:1] == " ":
                value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self._last_id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self._retry = int(value)
        # Any other field name is ignored, as the rules require.

    def _dispatch(self, events: list[SSE]) -> None:
        if self._data:
            events.append(
                SSE(
                    "\n".join(self._data),
                    event=self._event or None,
                    id=self._last_id or None,
                    retry=self._retry,
                )
            )
        self._data = []
        self._event = ""
        self._retry = None
