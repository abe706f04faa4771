"""Stubs: how a chainlet calls another one, or a deployed model, over HTTP.

- :mod:`chains.stubs.base`: ``StubBase``, the typed face (``run_remote``, ``from_url``, ``predict_*``);
- :mod:`chains.stubs.policy`: what every call does (replicas, deadlines, retries, failures, results);
- :mod:`chains.stubs.transport`: the interface under the policy, one method to send a request;
- :mod:`chains.stubs.aiohttp_transport`, :mod:`chains.stubs.httpx_transport`: the async and sync clients.

::

    class Words(chains.StubBase):
        async def run_remote(self, text: str) -> list[str]:
            return await self.call_remote(text=text)
"""

from chains.rpc_options import StubOptions
from chains.stubs.base import StubBase
from chains.stubs.policy import RETRY_STATUSES

__all__ = ["RETRY_STATUSES", "StubBase", "StubOptions"]
