"""Stream tickets: how a browser's ``EventSource`` proves it may call a chain with an API key.

An ``EventSource`` cannot send headers, and an API key in a URL would end up in browser
history, proxy logs and the server's own access log. So a page first asks for a ticket with
its key, ``POST /stream_ticket`` with ``Authorization: Bearer KEY``, and opens
``GET /run_remote?...&chains_ticket=TICKET``. A ticket is signed with a key derived from the
API key, the chain's name and its entrypoint's (so every replica of the entrypoint accepts
the tickets of the others; changing the API key voids every ticket; and a ticket of one
chain opens no other chain that shares its API key), says when it expires, and is good for
starting streams until then (60 s by default); a stream it started runs to its end.

>>> signer = TicketSigner(b"s3cr3t", "chat", "Entry", ttl_sec=60)
>>> ticket = signer.issue(now=1000.0)
>>> signer.refusal(ticket, now=1030.0) is None
True
>>> signer.refusal(ticket, now=1061.0)
'the stream ticket has expired; get a new one with POST /stream_ticket'
>>> TicketSigner(b"s3cr3t", "other-chain", "Entry").refusal(ticket, now=1030.0)  # doctest: +ELLIPSIS
"the stream ticket's signature is wrong ..."
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time

__all__ = ["TICKET_PARAM", "TICKET_TTL_SEC", "TicketSigner"]

TICKET_PARAM = "chains_ticket"
TICKET_TTL_SEC = 60.0
_VERSION = "t2"
_PURPOSE = b"chains stream ticket v2"


class TicketSigner:
    """Issues and checks stream tickets for one API key, chain and entrypoint."""

    def __init__(self, api_key: bytes, chain: str, entrypoint: str, ttl_sec: float = TICKET_TTL_SEC) -> None:
        # A key of its own, so that a ticket reveals nothing usable about the API key; the
        # names are length-prefixed, so that no two pairs of them sign alike.
        parts = (chain.encode(), entrypoint.encode())
        names = b"".join(len(part).to_bytes(4, "big") + part for part in parts)
        self._key = hmac.new(api_key, _PURPOSE + names, hashlib.sha256).digest()
        self.ttl_sec = ttl_sec

    def issue(self, now: float | None = None) -> str:
        """A new ticket, good until ``ttl_sec`` from ``now``."""
        expires = int((time.time() if now is None else now) + self.ttl_sec)
        body = f"{_VERSION}.{expires}.{secrets.token_hex(8)}"
        return f"{body}.{self._sign(body)}"

    def refusal(self, ticket: str, now: float | None = None) -> str | None:
        """Why ``ticket`` is refused, or None when it is good."""
        body, _, signature = ticket.rpartition(".")
        parts = body.split(".")
        if len(parts) != 3 or parts[0] != _VERSION or not parts[1].isdigit():
            return "not a stream ticket; get one with POST /stream_ticket"
        if not hmac.compare_digest(signature.encode(), self._sign(body).encode()):
            return (
                "the stream ticket's signature is wrong (a ticket opens only the chain and entrypoint "
                "that issued it, with the API key it had then)"
            )
        if int(parts[1]) < (time.time() if now is None else now):
            return "the stream ticket has expired; get a new one with POST /stream_ticket"
        return None

    def _sign(self, body: str) -> str:
        digest = hmac.new(self._key, body.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
