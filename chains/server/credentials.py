"""What a call must show to be let in: the chain's internal token, or an entrypoint's API key."""

from __future__ import annotations

import hmac
from collections.abc import Mapping

__all__ = ["Credentials"]


class Credentials:
    """An internal chainlet takes calls with the chain's token only; the entrypoint takes them
    with its API key, or from anyone when it has none.

    >>> credentials = Credentials(entrypoint=True, expected="key-1")
    >>> credentials.refusal({"authorization": "Bearer key-1"}) is None
    True
    """

    __slots__ = ("_entrypoint", "_expected")

    def __init__(self, entrypoint: bool, expected: str | None) -> None:
        self._entrypoint = entrypoint
        self._expected = (expected or "").encode()

    def refusal(self, headers: Mapping[str, str]) -> str | None:
        """Why a call with ``headers`` is refused, or None when its credentials are right."""
        expected = self._expected
        if not expected:
            return None
        given = headers.get("authorization", "")
        scheme, _, credential = given.partition(" ")
        # ``Api-Key`` is Baseten's scheme: code written against its API sends the key so.
        scheme = scheme.lower()
        if scheme != "bearer" and not (scheme == "api-key" and self._entrypoint):
            credential = headers.get("x-api-key", "") if self._entrypoint else ""
        if not credential:
            what = "an API key" if self._entrypoint else "the chain's internal token"
            return f"missing credentials: send `Authorization: Bearer <{what}>`"
        if not hmac.compare_digest(credential.strip().encode(), expected):
            return "wrong credentials"
        return None
