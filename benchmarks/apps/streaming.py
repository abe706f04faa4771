"""The same endpoint answered as a streaming response (chunked, one item then the end), two ways.

Chainlet endpoints may stream, so the server's cost of a streaming response matters as much as the
framework's. Starlette's ``StreamingResponse`` watches for client disconnects in a task group of its own
whenever the server speaks ASGI spec < 2.4, which uvicorn does; ``asgi_app`` sends the chunks itself.
"""

from collections.abc import AsyncIterator

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from benchmarks.apps import GenerateRequest, respond
from benchmarks.apps.bare_asgi import Receive, Scope, Send, lifespan, read_body

_NDJSON = "application/x-ndjson"


async def _generate(request: Request) -> Response:
    try:
        parsed = GenerateRequest.model_validate_json(await request.body())
    except ValidationError as exc:
        return Response(exc.json(), status_code=422, media_type="application/json")

    async def items() -> AsyncIterator[bytes]:
        yield respond(parsed).model_dump_json().encode() + b"\n"

    return StreamingResponse(items(), media_type=_NDJSON)


starlette_app = Starlette(routes=[Route("/generate", _generate, methods=["POST"])])


async def asgi_app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        await lifespan(receive, send)
        return
    if scope["type"] != "http":
        return
    try:
        parsed = GenerateRequest.model_validate_json(await read_body(receive))
    except ValidationError as exc:
        body = exc.json().encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 422, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        return
    except ConnectionError:
        return
    # No content-length, so uvicorn uses chunked encoding, as it must for a stream of unknown length.
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-type", _NDJSON.encode())]}
    )
    item = respond(parsed).model_dump_json().encode() + b"\n"
    await send({"type": "http.response.body", "body": item, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})
