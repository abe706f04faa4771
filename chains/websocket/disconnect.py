"""``WebSocketDisconnect``: what receiving from (or sending to) a closed socket raises.

Truss chains catch ``fastapi.WebSocketDisconnect``, which is starlette's class. chains does
not depend on starlette, so the exception is a subclass of starlette's when starlette is
installed (as it is wherever fastapi is) and a plain exception with the same ``code`` and
``reason`` otherwise: ``except fastapi.WebSocketDisconnect`` and ``except
chains.WebSocketDisconnect`` both catch it. Imported only where a socket is opened, since
starlette is not light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = ["WebSocketDisconnect"]

if TYPE_CHECKING:

    class _Base(Exception):
        def __init__(self, code: int = 1000, reason: str | None = None) -> None: ...

else:
    try:
        from starlette.websockets import WebSocketDisconnect as _Base
    except ImportError:  # pragma: no cover - exercised where starlette is not installed

        class _Base(Exception):
            def __init__(self, code: int = 1000, reason: str | None = None) -> None:
                self.code = code
                self.reason = reason or ""


class WebSocketDisconnect(_Base):
    """The peer closed the socket (``code`` and ``reason`` from its close frame).

    >>> WebSocketDisconnect(1001, "going away").code
    1001
    """

    code: int
    reason: str

    def __init__(self, code: int = 1000, reason: str | None = None) -> None:
        super().__init__(code, reason)
        self.code = code
        self.reason = reason or ""

    def __str__(self) -> str:
        return f"the WebSocket was closed (code {self.code}{', ' + self.reason if self.reason else ''})"
