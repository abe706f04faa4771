"""One chainlet with a unary endpoint: the work of ``benchmarks/apps/bare_starlette.py``, as a chainlet.

The body ``{"prompt": str, "max_tokens": int}`` is the endpoint's arguments, and the result is the same
``{"text", "tokens"}`` object the bare app returns, so both parse and answer the very same JSON. The
models are declared here rather than imported from ``benchmarks.apps``, as the generated server runs the
chain file on its own.
"""

import pydantic

import chains


class GenerateResponse(pydantic.BaseModel):
    text: str
    tokens: int


@chains.mark_entrypoint("bench-unary")
class Echo(chains.ChainletBase):
    async def run_remote(self, prompt: str, max_tokens: int) -> GenerateResponse:
        return GenerateResponse(text=prompt, tokens=max_tokens)
