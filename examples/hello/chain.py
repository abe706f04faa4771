"""Hello: an entrypoint that greets several names at once through a dependency."""

import asyncio
from typing import Annotated

import pydantic

import chains

# Each name is one call to Greeter: an unbounded list would let one request start any number
# of calls. Bounded, a longer list is refused with a 422 before any work starts.
MAX_NAMES = 100


# One replica, as the smallest chain: on a swarm its calls fail while its node is lost and
# until the swarm has replaced it; add remote_config = chains.RemoteConfig(compute=
# chains.Compute(replicas=2)) for a node's loss to leave one (docs/deploy.md, 3a).
class Greeter(chains.ChainletBase):
    """Greets one person."""

    async def run_remote(self, name: str, punctuation: str = "!") -> str:
        return f"Hello, {name}{punctuation}"


@chains.mark_entrypoint("hello")
class Hello(chains.ChainletBase):
    """Greets everyone concurrently: one call to Greeter per name."""

    def __init__(self, greeter: Greeter = chains.depends(Greeter, retries=2, timeout_sec=10)) -> None:
        self._greeter = greeter

    async def run_remote(
        self, names: Annotated[list[str], pydantic.Field(max_length=MAX_NAMES)]
    ) -> list[str]:
        return list(await asyncio.gather(*(self._greeter.run_remote(name) for name in names)))
