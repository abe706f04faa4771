"""Baseline: uvicorn + Starlette routing, the body read as bytes and validated by pydantic directly."""

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from benchmarks.apps import GenerateRequest, respond


async def generate(request: Request) -> Response:
    try:
        parsed = GenerateRequest.model_validate_json(await request.body())
    except ValidationError as exc:
        # Same status and payload shape FastAPI would send, so the three apps stay interchangeable.
        return Response(exc.json(), status_code=422, media_type="application/json")
    return Response(respond(parsed).model_dump_json(), media_type="application/json")


app = Starlette(routes=[Route("/generate", generate, methods=["POST"])])
