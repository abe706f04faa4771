"""Three chainlets in a row: Front (the entrypoint) calls Middle, which calls Back.

Middle runs two replicas, so that Ray spreads them over both nodes; Back autoscales between
one and two. With ``RELAY_EVERY_CHAINLET_TWICE=1`` at push time, Front and Back run two
replicas each as well: every chainlet then keeps a replica when one node goes away. Front
ends its stream with the secret ``relay_signature``.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import chains

TWICE = os.environ.get("RELAY_EVERY_CHAINLET_TWICE") == "1"
FRONT = chains.Compute(cpu_count=0.25, memory="128Mi", replicas=2 if TWICE else 1)
BACK = (
    chains.Compute(cpu_count=0.25, memory="128Mi", replicas=2)
    if TWICE
    else chains.Compute(cpu_count=0.25, memory="128Mi", concurrency=8, autoscale=(1, 2, 4))
)


class Back(chains.ChainletBase):
    """Upper-cases words; refuses the word 'fail'."""

    remote_config = chains.RemoteConfig(compute=BACK)

    async def run_remote(self, words: list[str]) -> list[str]:
        if "fail" in words:
            raise ValueError(f"Back refuses to upper-case 'fail' (got {len(words)} words)")
        return [word.upper() for word in words]


class Middle(chains.ChainletBase):
    """Splits text into words and has Back upper-case them."""

    remote_config = chains.RemoteConfig(compute=chains.Compute(cpu_count=0.25, memory="128Mi", replicas=2))

    def __init__(self, back: Back = chains.depends(Back, retries=3)) -> None:
        self._back = back

    async def run_remote(self, text: str) -> list[str]:
        return await self._back.run_remote(text.split())


@chains.mark_entrypoint("ray-relay")
class Front(chains.ChainletBase):
    """Streams Middle's words back, bracketed, then their count."""

    # Outside callers of a deployed chain get no tracebacks unless asked: the test reads every hop's.
    remote_config = chains.RemoteConfig(
        compute=FRONT,
        assets=chains.Assets(secret_keys=["relay_signature"]),
        options=chains.ChainletOptions(env_variables={"CHAINS_DEBUG_ERRORS": "1"}),
    )

    def __init__(
        self,
        middle: Middle = chains.depends(Middle, retries=3),
        context: chains.DeploymentContext = chains.depends_context(),
    ) -> None:
        self._middle = middle
        self._signature = context.secrets["relay_signature"]

    async def run_remote(self, text: str) -> AsyncIterator[str]:
        words = await self._middle.run_remote(text)
        for word in words:
            yield f"[{word}]"
        yield f" ({len(words)} words) -- {self._signature}"
