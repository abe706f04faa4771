"""The web example as its README runs it: the one-line static server, a browser, the chain."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.helpers import wait_until

HERE = Path(__file__).resolve().parent


@pytest.fixture
def web_page(example_origin: str) -> Iterator[str]:
    """``python -m http.server PORT --bind HOST --directory examples/web``, stopped after the test."""
    where = urlsplit(example_origin)
    command = [sys.executable, "-m", "http.server", str(where.port), "--bind", str(where.hostname)]
    server = subprocess.Popen(
        [*command, "--directory", str(HERE)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:

        def serving() -> bool:
            try:
                return httpx.get(f"{example_origin}/index.html", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(serving, 15, f"the example's static server on {example_origin}")
        yield example_origin
    finally:
        server.terminate()
        server.wait(10)


def test_the_page_streams_every_token_of_the_streaming_example(
    page: Any, web_page: str, streaming_chain: Any
) -> None:
    expected = streaming_chain.call(prompt="tokens on a page", max_tokens=7)
    page.goto(f"{web_page}/?chain={streaming_chain.entrypoint_url}")
    page.wait_for_function("document.body.dataset.ready === '1'")
    page.fill("#prompt", "tokens on a page")
    page.fill("#max-tokens", "7")
    page.click("button")
    page.wait_for_function("/^(done|failed)/.test(document.getElementById('status').textContent)")
    assert page.text_content("#status") == "done"
    assert page.evaluate("window.tokens") == expected
    assert page.text_content("#answer") == "".join(expected)
