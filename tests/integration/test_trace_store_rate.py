"""What the local trace store keeps of a busy chain (docs/observability.md, "What is kept"):
the first ``CHAINS_TRACE_RATE`` traces of each second whole, and every error and slow call, on
a real chain of two chainlet processes, read back from the store they write."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from chains.tracing.store import trace_spans
from tests.helpers import Cli, wait_until, write_chain

CHAIN = """
import asyncio

import chains


class Back(chains.ChainletBase):
    async def run_remote(self, text: str) -> str:
        if text == "fail":
            raise ValueError("failing on purpose")
        if text == "slow":
            await asyncio.sleep(0.3)
        return text.upper()


@chains.mark_entrypoint("sampled")
class Front(chains.ChainletBase):
    def __init__(self, back: Back = chains.depends(Back, retries=0)) -> None:
        self._back = back

    async def run_remote(self, text: str) -> str:
        return await self._back.run_remote(text)
"""

RATE = 5
CALLS = 60


def test_a_busy_chain_stores_some_traces_whole_and_every_error_and_slow_call(tmp_path: Path) -> None:
    file = write_chain(tmp_path / "src", CHAIN)
    home = tmp_path / "home"
    cli = Cli(home, env={"CHAINS_TRACE_RATE": str(RATE), "CHAINS_TRACE_SLOW_MS": "200"})
    pushed = cli.push(str(file))
    store = home / "sampled" / "traces.sqlite"
    try:
        ordinary: list[str] = []
        special: dict[str, str] = {}
        with httpx.Client(base_url=pushed["entrypoint_url"], timeout=30) as client:
            started = time.monotonic()
            for index in range(CALLS):
                text = "fail" if index in (20, 40) else "slow" if index == 30 else f"word{index}"
                answer = client.post("/run_remote", json={"text": text})
                assert answer.status_code == (500 if text == "fail" else 200), answer.text
                request_id = answer.headers["x-chains-request-id"]
                if text in ("fail", "slow"):
                    special[request_id] = text
                else:
                    ordinary.append(request_id)
            seconds = time.monotonic() - started

        def spans_of(request_id: str) -> list[str]:
            return sorted(f"{s.service}:{s.kind}" for s in trace_spans(store, request_id))

        whole = ["Back:server", "Front:client", "Front:server"]
        # Errors and the slow call: stored whole, though the second's share was long used up.
        for request_id, text in special.items():
            wait_until(lambda r=request_id: spans_of(r) == whole, 20, f"the {text} call's three spans")
        # The last call's spans are written within half a second, as every other call's are.
        time.sleep(1.0)
        kept = [r for r in ordinary if spans_of(r)]
        # Never one process's spans without the other's: the entrypoint decided for both.
        assert all(spans_of(r) == whole for r in kept), {r: spans_of(r) for r in kept}
        # At most RATE a second (the calls may straddle one second more than they took).
        assert 0 < len(kept) <= RATE * (int(seconds) + 2), (len(kept), seconds)
        assert len(kept) < len(ordinary), "every call was stored: the rate was not applied"
    finally:
        cli.run("stop", "sampled")


def test_with_rate_all_every_call_is_stored(tmp_path: Path) -> None:
    file = write_chain(tmp_path / "src", CHAIN)
    home = tmp_path / "home"
    cli = Cli(home, env={"CHAINS_TRACE_RATE": "all"})
    pushed = cli.push(str(file))
    try:
        with httpx.Client(base_url=pushed["entrypoint_url"], timeout=30) as client:
            ids = [
                client.post("/run_remote", json={"text": f"w{i}"}).headers["x-chains-request-id"]
                for i in range(30)
            ]
        store = home / "sampled" / "traces.sqlite"
        wait_until(lambda: all(len(trace_spans(store, r)) == 3 for r in ids), 20, "every call's three spans")
    finally:
        cli.run("stop", "sampled")
