"""The JSON body of a failed call to a pushed chain: the request id its header carries, and
a traceback in the user's own file (not the generated copy the chainlet runs)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from chains.wire import REQUEST_ID_HEADER
from tests.helpers import Cli, unique_port, write_chain

SOURCE = """
from collections.abc import AsyncIterator

import chains


class Words(chains.ChainletBase):
    async def run_remote(self, text: str) -> AsyncIterator[str]:
        if not text:
            raise ValueError("nothing to split")  # before the first item
        for word in text.split():
            yield word


@chains.mark_entrypoint("bodies")
class Entry(chains.ChainletBase):
    def __init__(self, words: Words = chains.depends(Words, retries=0)) -> None:
        self._words = words

    async def run_remote(self, text: str) -> AsyncIterator[str]:
        if text == "own":
            raise RuntimeError("the entrypoint's own failure")
        async for word in self._words.run_remote(text):
            yield word + " "
"""


@pytest.fixture(scope="module")
def pushed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    folder = tmp_path_factory.mktemp("bodies")
    file = write_chain(folder / "src", SOURCE)
    # Tracebacks go to outside callers only when debugging is asked for (docs/concepts.md, "Errors").
    cli = Cli(folder / "home", env={"CHAINS_DEBUG_ERRORS": "1"})
    url = str(cli.push(str(file), "--port", str(unique_port()))["entrypoint_url"])
    try:
        yield url, file
    finally:
        cli.run("stop", "bodies", check=False)


@pytest.mark.parametrize("text", ["own", ""], ids=["in-the-entrypoint", "in-a-dependency"])
def test_a_failure_before_the_first_item(pushed: tuple[str, Path], text: str) -> None:
    url, file = pushed
    response = httpx.post(url + "/run_remote", json={"text": text}, timeout=30)
    assert response.status_code == 500
    error = response.json()["error"]
    assert error["request_id"] and error["request_id"] == response.headers[REQUEST_ID_HEADER]
    hops = [error]
    while hops[-1].get("cause"):
        hops.append(hops[-1]["cause"])
    frames = "".join(hop["traceback"] for hop in hops)
    line = next(n for n, code in enumerate(SOURCE.splitlines(), 1) if "raise" in code and _raised(text, code))
    assert f'File "{file}", line {line}' in frames, frames
    assert "/generated/" not in frames


def _raised(text: str, code: str) -> bool:
    return ("RuntimeError" in code) if text == "own" else ("ValueError" in code)
