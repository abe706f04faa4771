from pathlib import Path

import pytest

import chains
from chains.loader import import_chain_file, load_chain
from chains.websocket.local import connect

CHAIN = Path(__file__).with_name("chain.py")


def test_realtime_chain_checks_clean() -> None:
    chain = load_chain(CHAIN)
    kinds = {spec.name: spec.endpoint.output_kind.name for spec in chain.chainlets}
    assert kinds == {"Transform": "websocket", "Relay": "websocket"}


@pytest.mark.parametrize("serialize", [True, False])
async def test_relay_transforms_text_and_binary_messages(serialize: bool) -> None:
    module, _ = import_chain_file(CHAIN)
    with chains.run_local(serialize=serialize):
        async with connect(module.Relay()) as ws:
            await ws.send_text("héllo")
            assert await ws.receive_text() == "HÉLLO"
            await ws.send_bytes(b"\x00\x01\x02")
            assert await ws.receive_bytes() == b"\x02\x01\x00"
            await ws.send_json({"a": 1})
            assert await ws.receive_text() == '{"A":1}'
