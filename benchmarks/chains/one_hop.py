"""A 1-hop chain: the entrypoint ``Front`` answers each call by calling ``Back`` through its stub.

``Back`` does the work of ``benchmarks/apps/bare_starlette.py``; ``Front`` passes the arguments on and
returns ``Back``'s result, so the entrypoint and the dependency parse and answer the same JSON.
"""

import pydantic

import chains


class GenerateResponse(pydantic.BaseModel):
    text: str
    tokens: int


class Back(chains.ChainletBase):
    async def run_remote(self, prompt: str, max_tokens: int) -> GenerateResponse:
        return GenerateResponse(text=prompt, tokens=max_tokens)


@chains.mark_entrypoint("bench-one-hop")
class Front(chains.ChainletBase):
    def __init__(self, back: Back = chains.depends(Back)) -> None:
        self._back = back

    async def run_remote(self, prompt: str, max_tokens: int) -> GenerateResponse:
        return await self._back.run_remote(prompt, max_tokens)
