"""A realtime chain: a client's socket to the entrypoint, relayed message by message to a
dependency that transforms each one (text upper-cased, binary reversed).

    chains push examples/realtime/chain.py
    chains call realtime          # type lines; each comes back transformed
"""

from __future__ import annotations

import chains


class Transform(chains.ChainletBase):
    """Answers each message as it arrives: text upper-cased, bytes reversed."""

    remote_config = chains.RemoteConfig(compute=chains.Compute(cpu_count=1, memory="256Mi", concurrency=64))

    async def run_remote(self, websocket: chains.WebSocketProtocol) -> None:
        async for message in websocket:
            await websocket.send(message.upper() if isinstance(message, str) else message[::-1])


@chains.mark_entrypoint("realtime")
class Relay(chains.ChainletBase):
    """Relays the client's messages to Transform and Transform's answers back."""

    remote_config = chains.RemoteConfig(compute=chains.Compute(cpu_count=1, memory="256Mi", concurrency=64))

    def __init__(self, transform: Transform = chains.depends(Transform, retries=3)) -> None:
        self._transform = transform

    async def run_remote(self, websocket: chains.WebSocketProtocol) -> None:
        async with self._transform.run_remote() as upstream:
            async for message in websocket:
                await upstream.send(message)
                await websocket.send(await upstream.receive())
