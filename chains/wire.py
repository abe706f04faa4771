"""The wire protocol's shared names: a chainlet server's routes, the headers and media types
a call carries, the frame limit, and the JSON settings every value is encoded with.

Servers, stubs, the light client and the streaming forms all take these from here, so that
each is spelled once and none of them imports another to learn it (``docs/wire-protocol.md``
describes the protocol)::

    response = httpx.post(url + RUN_REMOTE, json=arguments, headers={"accept": FRAMED_MEDIA_TYPE})
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any, Final

import pydantic

__all__ = [
    "ASYNC_REQUEST",
    "ASYNC_RUN_REMOTE",
    "BINARY_CONTEXT",
    "BINARY_MEDIA_TYPE",
    "BYTES_MEDIA_TYPE",
    "DEADLINE_HEADER",
    "DEBUG_HEADER",
    "DEFAULT_MAX_FRAME_BYTES",
    "FRAMED_MEDIA_TYPE",
    "HEALTHZ",
    "JSON_MEDIA_TYPE",
    "METRICS",
    "NDJSON_MEDIA_TYPE",
    "READYZ",
    "RECONNECT_HEADER",
    "REQUEST_ID_HEADER",
    "RESUMABLE_HEADER",
    "RUN_ID_HEADER",
    "RUN_REMOTE",
    "SSE_MEDIA_TYPE",
    "STREAM_CANCEL_HEADER",
    "STREAM_ID_HEADER",
    "STREAM_KIND_HEADER",
    "STREAM_OFFSET_HEADER",
    "TEXT_MEDIA_TYPE",
    "WIRE_CONFIG",
    "debug_proof",
    "wire_adapter",
]

# The routes of a chainlet server.
RUN_REMOTE: Final = "/run_remote"
HEALTHZ: Final = "/healthz"
READYZ: Final = "/readyz"
METRICS: Final = "/metrics"
# The entrypoint's async calls (docs/jobs.md): the submission, and each request's status.
ASYNC_RUN_REMOTE: Final = "/async_run_remote"
ASYNC_REQUEST: Final = "/async_request"
# A resumable stream (docs/jobs.md): asked for with ``X-Chains-Resumable: 1`` on POST /run_remote,
# answered with the run's id, whose events are read again at /async_request/{id}/events.
RESUMABLE_HEADER: Final = "x-chains-resumable"
RUN_ID_HEADER: Final = "x-chains-run-id"
# A stream that outlives a cut connection, in the server's memory (chains/server/reconnect.py):
# asked for with ``X-Chains-Reconnect: 1``, named in the answer's ``X-Chains-Stream-Id``, read
# on from a byte offset, or stopped on purpose.
RECONNECT_HEADER: Final = "x-chains-reconnect"
STREAM_ID_HEADER: Final = "x-chains-stream-id"
STREAM_OFFSET_HEADER: Final = "x-chains-stream-offset"
STREAM_CANCEL_HEADER: Final = "x-chains-stream-cancel"

# The headers of a call: its request id and the time it has left, carried to every hop (see
# chains/call_context.py), and the kind of stream an endpoint answers with.
REQUEST_ID_HEADER: Final = "x-chains-request-id"
DEADLINE_HEADER: Final = "x-chains-timeout"
STREAM_KIND_HEADER: Final = "x-chains-stream"
# Sent by the chain's owner (``chains call``) to see every hop's traceback: see debug_proof.
DEBUG_HEADER: Final = "x-chains-debug"

# Unary arguments and results: JSON, or MessagePack for stubs with use_binary.
JSON_MEDIA_TYPE: Final = "application/json"
BINARY_MEDIA_TYPE: Final = "application/x-msgpack"

# The forms of a stream: framed (what stubs and the client read), server-sent events, and raw.
FRAMED_MEDIA_TYPE: Final = "application/x-chains-stream"
SSE_MEDIA_TYPE: Final = "text/event-stream"
TEXT_MEDIA_TYPE: Final = "text/plain; charset=utf-8"
BYTES_MEDIA_TYPE: Final = "application/octet-stream"
NDJSON_MEDIA_TYPE: Final = "application/x-ndjson"

# The largest frame a reader accepts unless told otherwise (CHAINS_MAX_FRAME_BYTES on a server).
DEFAULT_MAX_FRAME_BYTES: Final = 64 * 2**20

# JSON has no bytes: base64 keeps any byte value intact where UTF-8 would refuse some. Nor
# has it NaN or infinities: pydantic would write them as null, which the next hop refuses
# for a float or takes for "no value", so a float must be finite to be sent or taken
# (``1e400`` parses as infinity, and is refused too).
WIRE_CONFIG: Final = pydantic.ConfigDict(
    ser_json_bytes="base64", val_json_bytes="base64", allow_inf_nan=False
)

# The serialization context of binary (MessagePack) calls: a custom field type that can travel
# as raw bytes there (chains.pydantic_numpy's arrays) checks for it and skips its text form.
BINARY_CONTEXT: Final[dict[str, Any]] = {"chains.wire": "binary"}


def wire_adapter(tp: Any) -> pydantic.TypeAdapter[Any]:
    """A TypeAdapter for ``tp`` with the wire's JSON settings where the type allows them."""
    try:
        return pydantic.TypeAdapter(tp, config=WIRE_CONFIG)
    except pydantic.PydanticUserError:  # models and dataclasses carry their own config
        return pydantic.TypeAdapter(tp)


def debug_proof(internal_token: str) -> str:
    """What ``DEBUG_HEADER`` carries to ask an entrypoint for every hop's traceback: proof of
    knowing the chain's internal token, which only its owner can read (the deployment's
    owner-only files), without sending the token itself to the entrypoint.

    >>> debug_proof("t0ken") == debug_proof("t0ken") != debug_proof("other")
    True
    """
    return hmac.new(internal_token.encode(), b"chains debug errors v1", hashlib.sha256).hexdigest()
