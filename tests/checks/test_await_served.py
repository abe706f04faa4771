"""A forgotten ``await`` the static check cannot see (a call through a local alias), in a
pushed chain: the generated stub names the method, the caller's file and line, and the fix,
in the error body for a coroutine used as its result and in the log for one dropped."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.helpers import Cli, unique_port, wait_until, write_chain

SOURCE = """
import chains


class Splitter(chains.ChainletBase):
    async def run_remote(self, text: str) -> list[str]:
        return text.split()


@chains.mark_entrypoint("forgot")
class Entry(chains.ChainletBase):
    def __init__(self, splitter: Splitter = chains.depends(Splitter, retries=0)) -> None:
        self._splitter = splitter

    async def run_remote(self, text: str, drop: bool = False) -> int:
        split = self._splitter.run_remote  # an alias: beyond the static check
        if drop:
            split(text)
            return 0
        return len(split(text))
"""


def _line(needle: str) -> int:
    hits = [n for n, code in enumerate(SOURCE.splitlines(), 1) if needle in code]
    assert len(hits) == 1, hits
    return hits[0]


@pytest.fixture(scope="module")
def pushed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cli, str, Path]]:
    folder = tmp_path_factory.mktemp("forgot")
    file = write_chain(folder / "src", SOURCE)
    cli = Cli(folder / "home", env={"CHAINS_DEBUG_ERRORS": "1"})
    # The push passes the static check: it cannot see the alias.
    url = str(cli.push(str(file), "--port", str(unique_port()))["entrypoint_url"])
    try:
        yield cli, url, file
    finally:
        cli.run("stop", "forgot", check=False)


def test_a_coroutine_used_as_its_result_names_the_line_and_the_fix(pushed: tuple[Cli, str, Path]) -> None:
    _, url, file = pushed
    response = httpx.post(url + "/run_remote", json={"text": "a b"}, timeout=30)
    assert response.status_code == 500, response.text
    detail = response.text
    line = _line("return len(split(text))")
    assert f"Splitter.run_remote(...) was called without `await` at {file}:{line}" in detail, detail
    assert "did you forget `await split(...)`?" in detail, detail
    assert "coroutine" in detail and "StubCall" not in detail and "/generated/" not in detail


def test_a_dropped_call_is_logged_with_its_line(pushed: tuple[Cli, str, Path]) -> None:
    cli, url, file = pushed
    response = httpx.post(url + "/run_remote", json={"text": "a b", "drop": True}, timeout=30)
    assert response.status_code == 200, response.text
    line = _line("            split(text)")
    expected = f"Splitter.run_remote(...) was called without `await` at {file}:{line}"

    def logged() -> bool:
        return expected in cli.run("logs", "forgot", "Entry").stdout

    wait_until(logged, 20, "the dropped call's warning in the entrypoint's log", poll=0.5)
    log = cli.run("logs", "forgot", "Entry").stdout
    warning = next(text for text in log.splitlines() if expected in text)
    assert "RuntimeWarning" in warning and "did you forget `await split(...)`?" in warning, warning
    assert "the call never ran" in warning
    # Python's own warning, naming the stub's internals, is gone.
    assert "was never awaited" not in log, log
