"""Two chainlets: Entry calls Upper; each has two replicas that take one call at a time.

Serve's proxy sends a call to a replica on its own node while that one has room;
``concurrency=1`` makes concurrent calls overflow to the replica on the other node, so that
they cross the link between the nodes, and Entry's replica there calls Upper back through
the proxy (tests/ray/test_ray_tls.py).
"""

from __future__ import annotations

import asyncio

import chains


class Upper(chains.ChainletBase):
    """Upper-cases words, taking a moment (so that concurrent calls spread over the replicas)."""

    remote_config = chains.RemoteConfig(
        compute=chains.Compute(cpu_count=0.25, memory="128Mi", replicas=2, concurrency=1)
    )

    async def run_remote(self, words: list[str]) -> list[str]:
        await asyncio.sleep(0.1)
        return [word.upper() for word in words]


@chains.mark_entrypoint("ray-pair")
class Entry(chains.ChainletBase):
    remote_config = chains.RemoteConfig(
        compute=chains.Compute(cpu_count=0.25, memory="128Mi", replicas=2, concurrency=1)
    )

    def __init__(self, upper: Upper = chains.depends(Upper, retries=3)) -> None:
        self._upper = upper

    async def run_remote(self, text: str) -> list[str]:
        return await self._upper.run_remote(text.split())
