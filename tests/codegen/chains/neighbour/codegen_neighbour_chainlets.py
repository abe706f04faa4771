"""A chainlet defined next to the chain file rather than in it."""

from codegen_neighbour_types import Point

import chains


class Echo(chains.ChainletBase):
    async def run_remote(self, point: Point, times: int = 1) -> list[Point]:
        return [point] * times
