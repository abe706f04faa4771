"""Request logs: one line per call, a failing stream logged once, logs readable once stopped."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.helpers import Cli, wait_until, write_chain

SOURCE = """
from collections.abc import AsyncIterator

import chains


class Words(chains.ChainletBase):
    async def run_remote(self, text: str) -> AsyncIterator[str]:
        for word in text.split():
            if word == "boom":
                raise ValueError("no booms in here")
            yield word


@chains.mark_entrypoint("logged")
class Entry(chains.ChainletBase):
    def __init__(self, words: Words = chains.depends(Words)) -> None:
        self._words = words

    async def run_remote(self, text: str) -> AsyncIterator[str]:
        async for word in self._words.run_remote(text):
            yield word.upper()
"""

LINE = re.compile(
    r" INFO (\w+) rid=(\w+) chains\.requests: \1 (\d{3}) [\d.]+ms(?: (\d+) items(, then failed)?)?$"
)


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Cli]:
    tool = Cli(tmp_path / "home")
    yield tool
    tool.run("stop", "logged", check=False)


def _request_lines(cli: Cli, chainlet: str) -> list[re.Match[str]]:
    logs = cli.run("logs", "logged", chainlet, "--lines", "500").stdout
    return [m for m in map(LINE.search, logs.splitlines()) if m is not None]


def test_one_line_per_call_a_failing_stream_once_and_logs_after_stop(cli: Cli, tmp_path: Path) -> None:
    file = write_chain(tmp_path / "chain", SOURCE)
    url = str(cli.push(str(file))["entrypoint_url"])
    rids = []
    for text in ["a b c", "d e", "f"]:
        response = httpx.post(url + "/run_remote", json={"text": text}, timeout=30)
        assert response.status_code == 200
        rids.append(response.headers["x-chains-request-id"])
    entry = _request_lines(cli, "Entry")
    assert [(m.group(3), m.group(4), m.group(2)) for m in entry] == [
        ("200", "3", rids[0]),
        ("200", "2", rids[1]),
        ("200", "1", rids[2]),
    ]
    assert len(_request_lines(cli, "Words")) == 3  # the hop's own line, same request ids
    assert {m.group(2) for m in _request_lines(cli, "Words")} == set(rids)

    # A stream that fails after its first item: one error line with the user's frame, no
    # "Exception in ASGI application" with the server's frames.
    body = {"text": "ok boom"}
    with (
        httpx.stream("POST", url + "/run_remote", json=body, timeout=30) as response,
        pytest.raises(httpx.HTTPError),
    ):
        response.read()

    def failed() -> list[tuple[str, str]]:
        lines = _request_lines(cli, "Entry") + _request_lines(cli, "Words")
        return [(m.group(1), m.group(4)) for m in lines if m.group(5)]

    # Each chainlet writes its line once its side of the call is over: Words may finish last.
    wait_until(lambda: len(failed()) == 2, 30, "both request lines of the failed stream")
    assert failed() == [("Entry", "1"), ("Words", "1")]
    logs = cli.run("logs", "logged", "--lines", "500").stdout
    assert logs.count("while streaming: ") == 2  # Words raised it; Entry passed it on
    assert "Exception in ASGI application" not in logs
    assert f'File "{file}", line 11, in run_remote' in logs
    assert "uvicorn" not in "".join(line for line in logs.splitlines() if line.startswith("  File"))

    cli.run("stop", "logged")
    stopped = cli.run("logs", "logged", "Entry")
    assert "chain 'logged' is not running; its last logs" in stopped.stderr
    assert "chains.requests: Entry 200" in stopped.stdout


def test_the_request_log_can_be_turned_off(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "home", env={"CHAINS_REQUEST_LOG": "0"})
    try:
        file = write_chain(tmp_path / "chain", SOURCE)
        url = str(cli.push(str(file))["entrypoint_url"])
        assert httpx.post(url + "/run_remote", json={"text": "a"}, timeout=30).status_code == 200
        assert _request_lines(cli, "Entry") == []
        assert "chainlet Entry is ready" in cli.run("logs", "logged", "Entry").stdout
    finally:
        cli.run("stop", "logged", check=False)


UNARY = """
import pydantic

import chains


class Point(pydantic.BaseModel):
    x: int


@chains.mark_entrypoint("failing")
class Entry(chains.ChainletBase):
    async def run_remote(self, mode: str) -> int:
        if mode == "own":
            Point(x="not a number")  # the body's own ValidationError
        return "not an int" if mode == "wrong" else 1  # type: ignore[return-value]
"""


def test_a_validation_error_the_body_raises_is_logged_as_raised_not_as_a_wrong_return(tmp_path: Path) -> None:
    """Only a value the body returned can mismatch its annotation; a ValidationError raised
    inside the body is the body's own failure, logged with its traceback in the user's file."""
    cli = Cli(tmp_path / "home")
    try:
        file = write_chain(tmp_path / "chain", UNARY)
        url = str(cli.push(str(file))["entrypoint_url"])
        for mode in ("own", "wrong"):
            assert httpx.post(url + "/run_remote", json={"mode": mode}, timeout=30).status_code == 500

        def errors() -> list[str]:
            logs = cli.run("logs", "failing", "Entry", "--lines", "500").stdout
            return [line for line in logs.splitlines() if " ERROR " in line]

        wait_until(lambda: len(errors()) >= 2, 30, "an error line for each failed call")
        own, wrong = errors()[:2]
        assert "run_remote raised ValidationError" in own
        assert "does not match its annotation" not in own
        assert "run_remote returned a value that does not match its annotation" in wrong
        logs = cli.run("logs", "failing", "Entry", "--lines", "500").stdout
        assert f'File "{file}", line 15, in run_remote' in logs
    finally:
        cli.run("stop", "failing", check=False)
