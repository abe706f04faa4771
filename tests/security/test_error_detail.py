"""What an outside caller of a chain on the local target sees of a failure one hop in.

A plain HTTP caller gets the error's type, message and request id; the chain's owner, with
``chains call`` (which proves it from the chain's owner-only files), gets every hop's
traceback as well. CHAINS_DEBUG_ERRORS=1 shows everyone everything; =0 shows nobody.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from chains.deploy import ChainHandle
from chains.wire import DEBUG_HEADER, REQUEST_ID_HEADER, debug_proof
from tests.security.conftest import pushed

INTERNAL = "Hidden"  # the internal chainlet, which an outside caller is not told of


@pytest.fixture(scope="module")
def chain(chains_home: Path) -> Iterator[ChainHandle]:
    with pushed("FailEntry", "detail-local") as handle:
        yield handle


def test_a_plain_http_caller_gets_type_message_and_request_id(chain: ChainHandle) -> None:
    answer = httpx.post(f"{chain.entrypoint_url}/run_remote", json={"x": 1.5}, timeout=20)
    assert answer.status_code == 500
    error = answer.json()["error"]
    assert (error["exc_type"], error["message"]) == ("ValueError", "cannot take 1.5")
    assert error["request_id"] == answer.headers[REQUEST_ID_HEADER]
    assert error["traceback"] == "" and error["cause"] is None
    assert INTERNAL not in answer.text and "File " not in answer.text


def test_a_wrong_proof_is_a_plain_caller(chain: ChainHandle) -> None:
    headers = {DEBUG_HEADER: debug_proof("not the chain's token")}
    answer = httpx.post(f"{chain.entrypoint_url}/run_remote", json={"x": 1.5}, headers=headers, timeout=20)
    assert answer.status_code == 500 and INTERNAL not in answer.text


def test_chains_call_keeps_every_hops_detail(chain: ChainHandle) -> None:
    called = subprocess.run(
        [sys.executable, "-m", "chains", "call", "detail-local", "--json", json.dumps({"x": 1.5})],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ),
    )
    assert called.returncode == 1
    assert "cannot take 1.5" in called.stderr and INTERNAL in called.stderr, called.stderr
    assert "raise ValueError" in called.stderr  # the internal hop's traceback


def test_debug_errors_shows_everyone_every_hop(chains_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHAINS_DEBUG_ERRORS", "1")
    with pushed("FailEntry", "detail-debug") as handle:
        answer = httpx.post(f"{handle.entrypoint_url}/run_remote", json={"x": 2.5}, timeout=20)
        assert answer.status_code == 500
        assert answer.json()["error"]["cause"]["chainlet"] == INTERNAL
