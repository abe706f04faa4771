"""The WebSocket benchmark's chain: ``Relay`` passes each message to ``Echo`` and its answer back."""

from __future__ import annotations

import chains

WIDE = chains.RemoteConfig(compute=chains.Compute(concurrency=256))


class Echo(chains.ChainletBase):
    remote_config = WIDE

    async def run_remote(self, websocket: chains.WebSocketProtocol) -> None:
        async for message in websocket:
            await websocket.send(message)


@chains.mark_entrypoint
class Relay(chains.ChainletBase):
    remote_config = WIDE

    def __init__(self, echo: Echo = chains.depends(Echo)) -> None:
        self._echo = echo

    async def run_remote(self, websocket: chains.WebSocketProtocol) -> None:
        async with self._echo.run_remote() as upstream:
            async for message in websocket:
                await upstream.send(message)
                await websocket.send(await upstream.receive())
