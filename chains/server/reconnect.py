"""Streams that outlive a cut connection: a caller that sends ``X-Chains-Reconnect: 1`` with a
streaming ``POST /run_remote`` may come back for the rest of the same run.

Every stream form (framed, server-sent events, raw text or bytes) is a byte stream, so a
stream's position is its byte offset, which every reader knows exactly: it is what it has
read. The answer names the run in ``X-Chains-Stream-Id``; a reader that loses the connection
sends ``POST /run_remote`` again with ``X-Chains-Stream-Id`` and ``X-Chains-Stream-Offset``
(the bytes it has) and gets the bytes after them, answered as the first connection was. The
stubs and ``chains.client`` do this by themselves (docs/wire-protocol.md, "Cut connections").

What is kept, in this process's memory: the run's last bytes (``CHAINS_STREAM_RECONNECT_BYTES``,
4 MiB), behind what was last handed to a reader, and at most 256 KiB ahead of it: a producer
whose reader is away waits there, as it would on a slow reader. A cut no longer cancels the
run at once: it waits ``CHAINS_STREAM_RECONNECT_SEC`` (10 s) for its reader to come back, then
is cancelled as a caller that left is. A reader that stops on purpose says so
(``X-Chains-Stream-Cancel: 1``), and the run is cancelled at once. A finished run that did not
all go out to a reader is kept as long again, for a reader cut during its last bytes. The run
is lost with this process: a stream that must survive a crash is a resumable job
(docs/jobs.md).
"""

from __future__ import annotations

import asyncio
import bisect
import enum
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from chains.environ import positive_number
from chains.errors import ChainsUsageError
from chains.server.asgi import Message, Receive, Send, send_json
from chains.server.streaming_response import StreamAborted
from chains.wire import STREAM_CANCEL_HEADER, STREAM_ID_HEADER, STREAM_OFFSET_HEADER

__all__ = ["ReconnectSettings", "ReplayRun", "Replays"]

_AHEAD_BYTES = 256 * 1024  # how far a producer may run ahead of its reader (or of none)
_ENDED_BYTES = 16 * 2**20  # what finished runs may keep in all, oldest dropped first
_STREAM_ID = STREAM_ID_HEADER.encode()
_STREAM_OFFSET = STREAM_OFFSET_HEADER.encode()


@dataclass(frozen=True)
class ReconnectSettings:
    """How long a cut stream waits for its reader, and how many of its bytes it keeps.

    >>> ReconnectSettings.from_env({"CHAINS_STREAM_RECONNECT_SEC": "0"}).enabled
    False
    """

    window_sec: float = 10.0
    keep_bytes: int = 4 * 2**20

    @property
    def enabled(self) -> bool:
        return self.window_sec > 0

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ReconnectSettings:
        raw = env.get("CHAINS_STREAM_RECONNECT_SEC", "").strip()
        if raw in ("0", "off"):
            window = 0.0
        else:
            window = positive_number(env, "CHAINS_STREAM_RECONNECT_SEC", cls.window_sec)
        keep = positive_number(env, "CHAINS_STREAM_RECONNECT_BYTES", cls.keep_bytes)
        if keep < _AHEAD_BYTES:
            raise ChainsUsageError(
                f"CHAINS_STREAM_RECONNECT_BYTES must be at least {_AHEAD_BYTES} (256 KiB), got {keep:g}"
            )
        return cls(window, int(keep))


class Outcome(enum.Enum):
    """How a run's producer ended."""

    END = "end"  # the stream's last byte was produced
    ABORT = "abort"  # it failed where the form has no in-band error: its readers are cut


class _Reader:
    """One connection reading a run: the task that sends to it, cancelled if another takes over."""

    __slots__ = ("task",)

    def __init__(self, task: asyncio.Task[Any] | None) -> None:
        self.task = task


class ReplayRun:
    """One stream's bytes, produced once, sent to whichever connection reads it now.

    The producer writes through :meth:`send` (an ASGI ``send``); each reader's bytes go out
    from :meth:`pump`. The first connection's reader is a task of its own, so that the
    producer never waits on a socket that may be dead; a returning reader pumps in its own
    request.
    """

    def __init__(self, run_id: str, settings: ReconnectSettings, expire: Callable[[], None]) -> None:
        self.id = run_id
        self._settings = settings
        self._expire = expire  # ends the producer as a caller leaving does
        self._chunks: list[bytes] = []
        self._ends: list[int] = []  # each kept chunk's end offset
        self._base = 0  # the offset of the first kept byte
        self.produced = 0
        self._sent = 0  # the furthest offset handed to a reader
        self._start: Message | None = None
        self.outcome: Outcome | None = None
        self._reader: _Reader | None = None
        self._more = asyncio.Event()
        self._room = asyncio.Event()
        self._timer: asyncio.TimerHandle | None = None
        self._first_reader: _Reader | None = None  # the first connection's, read by a task
        self.draining = False
        # The whole run went out on a connection that was still there: not kept once it ends.
        self.delivered = False

    # -- the producer's side -------------------------------------------------------------------

    def opened_on(self, send: Send) -> Send:
        """The ``send`` the producer answers through; ``send`` (the first connection's) is read
        by a task from here on."""

        async def first_reader() -> Outcome | None:
            return await self.pump(send, 0, reader)

        reader = _Reader(None)
        self._reader = self._first_reader = reader
        reader.task = asyncio.get_running_loop().create_task(first_reader())
        return self.send

    def first_left(self) -> bool:
        """The first connection went away (:class:`~chains.server.disconnect.DisconnectWatch`'s
        hook): the run goes on, waiting for its reader to come back."""
        if self._first_reader is not None:
            self.left(self._first_reader)
        return True

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = [*message.get("headers", ()), (_STREAM_ID, self.id.encode())]
            self._start = {**message, "headers": headers}
            self._more.set()
            return
        body: bytes = message.get("body", b"")
        if body:
            self._chunks.append(body)
            self.produced += len(body)
            self._ends.append(self.produced)
        if not message.get("more_body", False):
            self._finish(Outcome.END)
            return
        self._more.set()
        while self.produced - self._sent > _AHEAD_BYTES and self.outcome is None:
            self._room.clear()
            await self._room.wait()

    def abort(self) -> None:
        """The producer failed where the stream's form has no error of its own."""
        self._finish(Outcome.ABORT)

    def _finish(self, outcome: Outcome) -> None:
        if self.outcome is None:
            self.outcome = outcome
        self._cancel_timer()
        self._more.set()

    async def first_reader_done(self) -> bool:
        """Wait for the first connection to be sent the whole run; False if it was not (it left,
        or another connection took its place), in which case its response is to be cut."""
        first = self._first_reader.task if self._first_reader is not None else None
        if first is None:
            return False
        try:
            return await asyncio.shield(first) is Outcome.END
        except asyncio.CancelledError:
            if first.cancelled():
                return False
            raise

    # -- readers -------------------------------------------------------------------------------

    def check_offset(self, offset: int) -> str | None:
        """Why a reader cannot go on from ``offset`` (None: it can)."""
        if offset > self.produced:
            return f"offset {offset} is past the {self.produced} bytes the stream has produced"
        if offset < self._base:
            return (
                f"the stream's bytes from offset {offset} are no longer kept: it keeps the last "
                f"{self._settings.keep_bytes} bytes behind what it sent (CHAINS_STREAM_RECONNECT_BYTES)"
            )
        if offset == self.produced and self.outcome is Outcome.ABORT:
            return f"the stream's producer failed after {self.produced} bytes (the chainlet logged why)"
        return None

    def attach(self) -> _Reader:
        """A returning connection becomes the reader; the one before it, if any, is let go."""
        self._cancel_timer()
        previous = self._reader
        if previous is not None and previous.task is not None:
            previous.task.cancel()
        reader = _Reader(asyncio.current_task())
        self._reader = reader
        return reader

    def left(self, reader: _Reader) -> None:
        """``reader``'s connection went away: the run waits for the next one, for a while (not
        on a server that drains, whose drain would wait for it)."""
        if self._reader is not reader:
            return  # another has taken its place
        self._reader = None
        if reader is self._first_reader and reader.task is not None:
            reader.task.cancel()
        if self.draining:
            self._expired()
        elif self.outcome is None and self._timer is None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self._settings.window_sec, self._expired)

    def drain(self) -> None:
        """The server drains: end the run now if nobody reads it, or once its reader leaves."""
        self.draining = True
        if self._reader is None:
            self._cancel_timer()
            self._expired()

    def cancel(self) -> None:
        """The reader stopped on purpose: end the producer now."""
        self._reader = None
        if self.outcome is None:
            self._expire()

    def _expired(self) -> None:
        self._timer = None
        if self._reader is None and self.outcome is None:
            self._expire()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def pump(self, send: Send, offset: int, reader: _Reader) -> Outcome | None:
        """Send the run from ``offset`` to ``reader``'s connection until the run ends; its
        outcome, or None if another reader took over first."""
        while self._start is None:
            self._more.clear()
            await self._more.wait()
        start = self._start
        if offset:
            start = {**start, "headers": [*start["headers"], (_STREAM_OFFSET, str(offset).encode())]}
        await send(start)
        while self._reader is reader:
            if offset < self.produced:
                body = self._slice(offset)
                offset += len(body)
                await send({"type": "http.response.body", "body": body, "more_body": True})
                if offset > self._sent:
                    self._sent = offset
                    self._trim()
                    self._room.set()
                continue
            outcome = self.outcome
            if outcome is not None:
                if outcome is Outcome.END:
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                    self.delivered = True
                return outcome
            self._more.clear()
            await self._more.wait()
        return None

    def _slice(self, offset: int) -> bytes:
        i = bisect.bisect_right(self._ends, offset)
        chunk = self._chunks[i]
        skip = offset - (self._ends[i] - len(chunk))
        head = chunk[skip:] if skip else chunk
        rest = self._chunks[i + 1 :]
        return b"".join([head, *rest]) if rest else head

    def _trim(self) -> None:
        """Let go of the chunks that end more than ``keep_bytes`` behind what was sent."""
        drop = bisect.bisect_right(self._ends, self._sent - self._settings.keep_bytes)
        if drop:
            self._base = self._ends[drop - 1]
            del self._chunks[:drop]
            del self._ends[:drop]

    @property
    def kept_bytes(self) -> int:
        return self.produced - self._base

    @property
    def idle(self) -> bool:
        return self._reader is None

    def release(self) -> None:
        """Let go of the bytes and of what refers back to the call: the first reader's task
        and the watch make a cycle with the run, which would otherwise hold its bytes until
        the garbage collector's rare full pass (the soak test saw servers grow by a fifth)."""
        self._chunks = []
        self._ends = []
        self._first_reader = self._reader = None
        self._expire = _ignore


class Replays:
    """The reconnectable streams of one server, by id, while they run and a while after."""

    def __init__(self, settings: ReconnectSettings) -> None:
        self.settings = settings
        self._runs: dict[str, ReplayRun] = {}
        self._ended: OrderedDict[str, int] = OrderedDict()  # finished runs, oldest first: their bytes
        self._ended_bytes = 0
        self._draining = False

    def open(self, expire: Callable[[], None]) -> ReplayRun:
        run = ReplayRun(uuid.uuid4().hex, self.settings, expire)
        run.draining = self._draining
        self._runs[run.id] = run
        return run

    def closed(self, run: ReplayRun) -> None:
        """The run's producer is done: keep it for a returning reader, for a while and within
        the bound on all finished runs' bytes, unless all of it went out to one already (under
        load, finished runs kept for nothing were what a server's memory grew by)."""
        if run.delivered:
            self._runs.pop(run.id, None)
            run.release()
            return
        size = run.kept_bytes
        self._ended[run.id] = size
        self._ended_bytes += size
        while self._ended_bytes > _ENDED_BYTES and len(self._ended) > 1:
            self._forget(next(iter(self._ended)))
        asyncio.get_running_loop().call_later(self.settings.window_sec, self._forget, run.id)

    def _forget(self, run_id: str) -> None:
        run = self._runs.pop(run_id, None)
        if run is not None and run.idle:
            run.release()  # one still being read is left to its reader, then to the collector
        self._ended_bytes -= self._ended.pop(run_id, 0)

    def __len__(self) -> int:
        return len(self._runs)

    def drain(self) -> None:
        """The server drains: runs nobody reads end now, the others once their reader leaves."""
        self._draining = True
        for run in list(self._runs.values()):
            run.drain()

    async def serve(self, headers: dict[str, str], receive: Receive, send: Send) -> None:
        """Answer a returning reader (``X-Chains-Stream-Id``) or one that stops on purpose."""
        run_id = headers[STREAM_ID_HEADER].strip()
        run = self._runs.get(run_id)
        if run is None:
            detail = (
                f"no stream {run_id!r} here: it ended over {self.settings.window_sec:g}s ago, waited "
                "that long for its reader, or this server restarted (a stream is kept in memory; "
                "one that must survive a restart is a resumable job, see docs/jobs.md)"
            )
            await send_json(send, 404, {"detail": detail})
            return
        if headers.get(STREAM_CANCEL_HEADER, "").strip() == "1":
            run.cancel()
            await send_json(send, 200, {"canceled": True})
            return
        text = headers.get(STREAM_OFFSET_HEADER, "").strip()
        if not text.isdigit():
            detail = f"{STREAM_OFFSET_HEADER} must be the number of the stream's bytes read, got {text!r}"
            await send_json(send, 400, {"detail": detail})
            return
        offset = int(text)
        problem = run.check_offset(offset)
        if problem is not None:
            await send_json(send, 410 if offset <= run.produced else 400, {"detail": problem})
            return
        reader = run.attach()
        watcher = asyncio.create_task(_watch(receive, run, reader))
        try:
            outcome = await run.pump(send, offset, reader)
        except asyncio.CancelledError:
            outcome = None  # the connection went, or another reader took over
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
        finally:
            watcher.cancel()
        if outcome is not Outcome.END:
            # Cut, not ended: a raw stream that failed, or a reader that was replaced.
            raise StreamAborted("the stream was cut")


def _ignore() -> None:
    pass


async def _watch(receive: Receive, run: ReplayRun, reader: _Reader) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    run.left(reader)
    if reader.task is not None:
        reader.task.cancel()
