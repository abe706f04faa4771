"""The end of a log file: what ``chains logs`` and the dashboard show of a chainlet's log."""

from __future__ import annotations

import io
import threading
from pathlib import Path

import pytest

from chains.targets import logs
from chains.targets.logs import follow_files, last_lines

CONTENTS = [
    b"",
    b"a\n",
    b"a",
    b"a\nbb\nccc\n",
    b"a\nbb\nccc",
    b"\n\n\n",
    b"x" * 50 + b"\n" + b"y" * 40 + b"\nz",
    "caf\u00e9 \u2603\nna\u00efve\n".encode(),
    b"crlf\r\nlines\r\n",
]


@pytest.mark.parametrize("block", [1, 3, 7, 64 * 1024])
@pytest.mark.parametrize("content", CONTENTS)
def test_the_last_lines_are_those_of_the_whole_file_whatever_the_block(
    monkeypatch: pytest.MonkeyPatch, block: int, content: bytes
) -> None:
    monkeypatch.setattr(logs, "_BLOCK", block)
    for count in range(5):
        handle = io.BytesIO(content)
        expected = content.decode().splitlines()[-count:] if count else []
        assert last_lines(handle, count) == expected
        assert handle.tell() == len(content)  # left at the end, where a follower reads on


@pytest.mark.parametrize("content", CONTENTS)
def test_a_follower_leaves_a_line_still_being_written_for_later(content: bytes) -> None:
    handle = io.BytesIO(content)
    whole = content[: content.rfind(b"\n") + 1]
    assert last_lines(handle, 3, unfinished=False) == whole.decode().splitlines()[-3:]
    assert handle.tell() == len(whole)


def test_a_large_log_is_read_from_its_end_only(tmp_path: Path) -> None:
    path = tmp_path / "big.log"
    path.write_bytes(b"".join(b"line %d\n" % i for i in range(200_000)))
    reads: list[int] = []

    class Counting(io.FileIO):
        def read(self, size: int = -1) -> bytes:
            data = super().read(size)
            reads.append(len(data))
            return data

    with Counting(path, "r") as handle:
        assert last_lines(handle, 3) == ["line 199997", "line 199998", "line 199999"]
    assert sum(reads) <= logs._BLOCK < path.stat().st_size


def test_following_yields_a_line_once_it_is_whole(tmp_path: Path) -> None:
    path = tmp_path / "Worker.log"
    path.write_bytes(b"started\nhalf of a ")
    lines = follow_files([path], 10, follow=True)
    assert next(lines) == "started"
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(next(lines)), daemon=True)
    reader.start()
    with open(path, "ab") as handle:
        handle.write(b"line\nnext\n")
    reader.join(timeout=10)
    assert got == ["half of a line"]
    assert next(lines) == "next"
    lines.close()


def test_several_files_are_labelled_by_name(tmp_path: Path) -> None:
    (tmp_path / "A-0.log").write_text("one\ntwo\n")
    (tmp_path / "A-1.log").write_text("three\n")
    paths = sorted(tmp_path.glob("*.log"))
    assert list(follow_files(paths, 1, follow=False)) == ["A-0 | two", "A-1 | three"]
