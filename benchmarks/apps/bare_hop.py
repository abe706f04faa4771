"""The bare 1-hop floor: a plain Starlette app that answers by calling another plain Starlette app.

It validates the request like ``bare_starlette``, POSTs the validated model to the app at
``BENCH_HOP_URL`` (``bare_starlette``'s ``/generate``) with one aiohttp session shared by every
request, validates that answer as the response model and returns it: a chain hop with nothing but
the work that cannot be avoided.
"""

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from benchmarks.apps import GenerateRequest, GenerateResponse

_HEADERS = {"Content-Type": "application/json"}


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    async with aiohttp.ClientSession() as session:
        app.state.session = session
        yield


async def generate(request: Request) -> Response:
    try:
        parsed = GenerateRequest.model_validate_json(await request.body())
    except ValidationError as exc:
        return Response(exc.json(), status_code=422, media_type="application/json")
    session: aiohttp.ClientSession = request.app.state.session
    async with session.post(request.app.state.url, data=parsed.model_dump_json(), headers=_HEADERS) as reply:
        payload = await reply.read()
        if reply.status != 200:
            return Response(payload, status_code=502, media_type="application/json")
    result = GenerateResponse.model_validate_json(payload)
    return Response(result.model_dump_json(), media_type="application/json")


app = Starlette(routes=[Route("/generate", generate, methods=["POST"])], lifespan=lifespan)
app.state.url = os.environ.get("BENCH_HOP_URL", "http://127.0.0.1:8000/generate")
