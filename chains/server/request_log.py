"""The request log: one line per call, ``Entry 200 12.3ms 8 items``, written off the request path.

Through :mod:`logging`, one line costs a chainlet about 25 µs of CPU (a ``LogRecord``, the
filters, the formatter's time, a write and a flush), as much as answering the call itself
(``benchmarks/defaults.py``). So a call only appends a tuple to a list
(:mod:`chains.handoff`); a daemon thread wakes when there is something to write, waits
``delay_s`` for more, and writes the batch in one write to the stream of the process's log
handler, in that handler's format, with the call's own time. Where the log is set up
otherwise (no single stream handler, a format naming fields a line does not have), each line
goes through the ``chains.requests`` logger instead, still from the thread.

What may be lost: the lines of the last ``delay_s`` (0.1 s) when the process is killed with
SIGKILL; at a normal exit, the lines waiting are written first.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from chains.handoff import HandOff

__all__ = ["RequestLog", "request_log"]

request_log = logging.getLogger("chains.requests")

# The fields a line knows; a format naming any other is left to logging itself.
_FIELDS = frozenset(("asctime", "levelname", "levelno", "name", "message", "request_id", "msecs", "created"))
_FIELD = re.compile(r"%\((\w+)\)")

# (time.time(), status, elapsed ms, request id, items streamed or -1, the stream failed)
Entry = tuple[float, int, float, str, int, bool]


class RequestLog:
    """The request log of chainlet ``chainlet``::

    log = RequestLog("Entry")
    log.write(time.time(), 200, 12.3, "4bf92f35...", items=-1, failed=False)
    log.flush()   # what is waiting, now (also done at exit)
    """

    def __init__(self, chainlet: str, delay_s: float = 0.1) -> None:
        self.chainlet = chainlet
        self._lines: HandOff[Entry] = HandOff(self._deliver, name="chains-request-log", delay_s=delay_s)

    def write(
        self, ended: float, status: int, elapsed_ms: float, request_id: str, items: int, failed: bool
    ) -> None:
        """Add one call's line; ``items`` is -1 for a unary call."""
        self._lines.put((ended, status, elapsed_ms, request_id, items, failed))

    def flush(self) -> None:
        self._lines.flush()

    def close(self) -> None:
        self._lines.close()

    def _deliver(self, entries: list[Entry]) -> None:
        if request_log.isEnabledFor(logging.INFO):
            self._emit(entries)

    def message(self, entry: Entry) -> str:
        _, status, elapsed_ms, _, items, failed = entry
        streamed = ""
        if items >= 0 and status == 200:
            streamed = f" {items} items" + (", then failed" if failed else "")
        return f"{self.chainlet} {status} {elapsed_ms:.1f}ms{streamed}"

    def _emit(self, entries: list[Entry]) -> None:
        handler = _single_stream_handler()
        if handler is None:
            for entry in entries:
                self._through_logging(entry)
            return
        formatter = handler.formatter or logging.Formatter()
        fmt = formatter._fmt or "%(message)s"
        lines = []
        stamp = _Stamps(formatter)
        for entry in entries:
            ended, _, _, request_id, _, _ = entry
            fields = {
                "asctime": stamp(ended),
                "levelname": "INFO",
                "levelno": logging.INFO,
                "name": request_log.name,
                "message": self.message(entry),
                "request_id": request_id,
                "msecs": (ended % 1) * 1000,
                "created": ended,
            }
            lines.append(fmt % fields)
        text = handler.terminator.join(lines) + handler.terminator
        handler.acquire()
        try:
            handler.stream.write(text)
            handler.flush()
        except Exception:
            handler.handleError(logging.makeLogRecord({"msg": text}))
        finally:
            handler.release()

    def _through_logging(self, entry: Entry) -> None:
        ended, _, _, request_id, _, _ = entry
        record = request_log.makeRecord(
            request_log.name,
            logging.INFO,
            "",
            0,
            self.message(entry),
            (),
            None,
            extra={"request_id": request_id},
        )
        record.created = ended
        record.msecs = (ended % 1) * 1000
        request_log.handle(record)


class _Stamps:
    """``formatter``'s ``%(asctime)s`` of a time, its date part made once per second."""

    def __init__(self, formatter: logging.Formatter) -> None:
        self._formatter = formatter
        self._second = -1
        self._prefix = ""

    def __call__(self, when: float) -> str:
        formatter = self._formatter
        second = int(when)
        if second != self._second:
            self._second = second
            moment = formatter.converter(when)
            self._prefix = time.strftime(formatter.datefmt or formatter.default_time_format, moment)
        if formatter.datefmt or not formatter.default_msec_format:
            return self._prefix
        return formatter.default_msec_format % (self._prefix, int((when % 1) * 1000))


def _single_stream_handler() -> logging.StreamHandler[Any] | None:
    """The one stream handler a request line ends at, if the lines may be written to it directly:
    no handler on the way but that one, a %-style format naming only fields a line has."""
    if request_log.handlers or not request_log.propagate:
        return None
    handlers = logging.getLogger().handlers
    if len(handlers) != 1 or not isinstance(handlers[0], logging.StreamHandler):
        return None
    handler: logging.StreamHandler[Any] = handlers[0]
    formatter = handler.formatter
    if formatter is not None:
        if (
            type(formatter._style) is not logging.PercentStyle
            or type(formatter).format is not logging.Formatter.format
        ):
            return None
        if not set(_FIELD.findall(formatter._fmt or "")) <= _FIELDS:
            return None
    return handler if handler.level <= logging.INFO else None
