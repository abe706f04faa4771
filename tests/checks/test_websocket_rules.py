"""The rules of a WebSocket endpoint's signature: each test asserts the place and the fix hint."""

from __future__ import annotations

from collections.abc import Callable

from chains.loader import load_chain
from tests.checks.conftest import ChainFile

Write = Callable[..., ChainFile]


def test_a_websocket_endpoint_is_described_as_one(chain_file: Write) -> None:
    f = chain_file("""
        @chains.mark_entrypoint
        class Entry(chains.ChainletBase):
            async def run_remote(self, websocket: chains.WebSocketProtocol) -> None:
                await websocket.send_text(await websocket.receive_text())
    """)
    spec = load_chain(f.path).entrypoint.endpoint
    assert spec.output_kind.name == "websocket" and spec.output_kind.is_socket
    assert spec.params == ()
    assert "WebSocket" in spec.describe()


def test_sync_websocket_endpoint_says_async_def(chain_file: Write) -> None:
    f = chain_file("""
        @chains.mark_entrypoint
        class Entry(chains.ChainletBase):
            def run_remote(self, websocket: chains.WebSocketProtocol) -> None:
                pass
    """)
    v = f.only_violation()
    assert (v.line, v.where) == (f.line("def run_remote"), "Entry.run_remote")
    assert "must be `async def`" in v.message and "chains.WebSocketProtocol) -> None" in v.message


def test_a_yielding_websocket_endpoint_is_told_to_send(chain_file: Write) -> None:
    f = chain_file("""
        @chains.mark_entrypoint
        class Entry(chains.ChainletBase):
            async def run_remote(self, websocket: chains.WebSocketProtocol) -> AsyncIterator[str]:
                yield "x"
    """)
    first, second = f.violations()
    assert "does not yield" in first.message
    assert "returns None" in second.message and second.line == f.line("async def run_remote")


def test_other_parameters_and_a_second_socket_are_refused(chain_file: Write) -> None:
    f = chain_file("""
        @chains.mark_entrypoint
        class Entry(chains.ChainletBase):
            async def run_remote(
                self,
                websocket: chains.WebSocketProtocol,
                other: chains.WebSocketProtocol,
                prompt: str,
            ) -> None:
                pass
    """)
    several, extra = f.violations()
    assert "one WebSocketProtocol parameter, not several (websocket, other)" in several.message
    assert extra.line == f.line("prompt: str")
    assert "receive it as a message instead" in extra.message


def test_a_missing_return_annotation_asks_for_none(chain_file: Write) -> None:
    f = chain_file("""
        @chains.mark_entrypoint
        class Entry(chains.ChainletBase):
            async def run_remote(self, websocket: chains.WebSocketProtocol):
                pass
    """)
    v = f.only_violation()
    assert "add `-> None`" in v.message
