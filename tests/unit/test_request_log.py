"""The request log's writer: lines in the log handler's own format, written from a thread."""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Iterator

import pytest

from chains.server.request_log import RequestLog, request_log

FORMAT = "%(asctime)s %(levelname)s Entry rid=%(request_id)s %(name)s: %(message)s"


@pytest.fixture
def root_stream() -> Iterator[io.StringIO]:
    """The root logger's one handler, a stream, as a chainlet server sets it up."""
    root = logging.getLogger()
    saved, level = root.handlers[:], root.level
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter(FORMAT))

    def only_ours() -> None:
        root.handlers[:] = [handler]  # pytest adds its own handlers once the test is called

    only_ours()
    root.setLevel(logging.INFO)
    setattr(stream, "only_ours", only_ours)  # noqa: B010
    yield stream
    root.handlers[:] = saved
    root.setLevel(level)


def _direct(stream: io.StringIO, monkeypatch: pytest.MonkeyPatch) -> None:
    """Leave the stream handler alone on the root logger, and fail on the way through logging."""
    stream.only_ours()  # type: ignore[attr-defined]

    def through_logging(*_: object) -> None:
        raise AssertionError("the line went through logging, not to the stream")

    monkeypatch.setattr(RequestLog, "_through_logging", through_logging)


def test_lines_are_written_in_the_handlers_format_with_the_calls_time(
    root_stream: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    _direct(root_stream, monkeypatch)
    log = RequestLog("Entry", delay_s=60)  # the thread waits: flush() writes
    try:
        log.write(1_700_000_000.25, 200, 12.34, "abc", items=-1, failed=False)
        log.write(1_700_000_000.5, 200, 3.0, "def", items=8, failed=True)
        log.write(1_700_000_001.0, 503, 0.4, "ghi", items=0, failed=False)
        assert root_stream.getvalue() == ""  # nothing on the request path
        log.flush()
    finally:
        log.close()
    expected = logging.Formatter(FORMAT)
    lines = root_stream.getvalue().splitlines()
    assert [line.split(" ", 3)[3] for line in lines] == [
        "Entry rid=abc chains.requests: Entry 200 12.3ms",
        "Entry rid=def chains.requests: Entry 200 3.0ms 8 items, then failed",
        "Entry rid=ghi chains.requests: Entry 503 0.4ms",
    ]
    record = logging.makeLogRecord({"created": 1_700_000_000.25, "msecs": 250.0})
    assert lines[0].startswith(expected.formatTime(record) + " INFO ")


def test_the_thread_writes_what_waits(root_stream: io.StringIO, monkeypatch: pytest.MonkeyPatch) -> None:
    _direct(root_stream, monkeypatch)
    log = RequestLog("Entry", delay_s=0.01)
    try:
        for n in range(100):
            log.write(1_700_000_000.0, 200, 1.0, f"r{n}", items=-1, failed=False)
        for _ in range(200):
            if root_stream.getvalue().count("\n") == 100:
                break
            time.sleep(0.01)  # the thread's turn
    finally:
        log.close()
    assert [line.split("rid=")[1].split()[0] for line in root_stream.getvalue().splitlines()] == [
        f"r{n}" for n in range(100)
    ]


def test_a_log_set_up_otherwise_gets_records_through_logging(caplog: pytest.LogCaptureFixture) -> None:
    log = RequestLog("Entry", delay_s=60)
    with caplog.at_level(logging.INFO, logger=request_log.name):
        log.write(1_700_000_000.0, 500, 2.0, "xyz", items=-1, failed=False)
        log.close()
    (record,) = [r for r in caplog.records if r.name == "chains.requests"]
    assert record.getMessage() == "Entry 500 2.0ms" and record.request_id == "xyz"  # type: ignore[attr-defined]
    assert record.created == 1_700_000_000.0


def test_below_info_nothing_is_written(root_stream: io.StringIO) -> None:
    logging.getLogger().setLevel(logging.WARNING)
    log = RequestLog("Entry", delay_s=60)
    log.write(1_700_000_000.0, 200, 1.0, "abc", items=-1, failed=False)
    log.close()
    assert root_stream.getvalue() == ""
