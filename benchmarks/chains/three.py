"""Three chainlets with no heavy imports, for push-to-ready time and per-process memory:
``Entry`` calls ``Middle``, which calls ``Leaf``."""

import chains


class Leaf(chains.ChainletBase):
    async def run_remote(self, text: str) -> str:
        return text.upper()


class Middle(chains.ChainletBase):
    def __init__(self, leaf: Leaf = chains.depends(Leaf)) -> None:
        self._leaf = leaf

    async def run_remote(self, text: str) -> str:
        return await self._leaf.run_remote(text) + "!"


@chains.mark_entrypoint("bench-three")
class Entry(chains.ChainletBase):
    def __init__(self, middle: Middle = chains.depends(Middle)) -> None:
        self._middle = middle

    async def run_remote(self, text: str) -> str:
        return await self._middle.run_remote(text)
