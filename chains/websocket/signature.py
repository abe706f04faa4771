"""The rules of a WebSocket endpoint's signature, checked with the other endpoint rules.

``async def run_remote(self, websocket: chains.WebSocketProtocol) -> None``: a coroutine
(not a generator, not sync), exactly one parameter, annotated ``WebSocketProtocol``, and
nothing returned (what the chainlet has to say, it sends). A stub's ``run_remote`` for such
an endpoint takes nothing and returns the connection:
``def run_remote(self) -> AbstractAsyncContextManager[WebSocketProtocol]``.
"""

from __future__ import annotations

import contextlib
import inspect
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from chains.errors import Violation
from chains.locations import Locator
from chains.websocket.protocol import WebSocketProtocol

__all__ = ["is_socket_annotation", "is_socket_connection", "websocket_violations"]

_EXAMPLE = "`async def run_remote(self, websocket: chains.WebSocketProtocol) -> None`"


def is_socket_annotation(annotation: Any) -> bool:
    """Whether a parameter annotated so is given the socket."""
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation is WebSocketProtocol


def is_socket_connection(annotation: Any) -> bool:
    """Whether a stub's ``run_remote`` returning ``annotation`` opens a socket."""
    origin = typing.get_origin(annotation)
    if origin not in (contextlib.AbstractAsyncContextManager, typing.AsyncContextManager):
        return False
    args = typing.get_args(annotation)
    return bool(args) and is_socket_annotation(args[0])


def websocket_violations(
    method: Any, params: Sequence[inspect.Parameter], hints: Mapping[str, Any], locator: Locator
) -> list[Violation]:
    """What is wrong with ``method`` as a WebSocket endpoint (one of its parameters is a socket)."""
    found: list[Violation] = []
    method_name = method.__name__
    if inspect.isasyncgenfunction(method) or inspect.isgeneratorfunction(method):
        found.append(
            locator.at_method(
                method_name,
                f"a WebSocket endpoint sends with `websocket.send_*`, it does not yield; write {_EXAMPLE}",
            )
        )
    elif not inspect.iscoroutinefunction(method):
        found.append(
            locator.at_method(method_name, f"a WebSocket endpoint must be `async def`: write {_EXAMPLE}")
        )
    sockets = [p for p in params if is_socket_annotation(hints.get(p.name))]
    others = [p for p in params if p not in sockets]
    if len(sockets) > 1:
        names = ", ".join(p.name for p in sockets)
        found.append(
            locator.at_method(
                method_name, f"`{method_name}` takes one WebSocketProtocol parameter, not several ({names})"
            )
        )
    for p in others:
        found.append(
            locator.at_param(
                method_name,
                p.name,
                f"a WebSocket endpoint takes the socket alone; `{p.name}` cannot be passed: receive it as a "
                f"message instead (e.g. `await websocket.receive_json()`), as in {_EXAMPLE}",
            )
        )
    returns = hints.get("return", inspect.Parameter.empty)
    if returns is inspect.Parameter.empty:
        found.append(locator.at_param(method_name, "return", f"add `-> None`: {_EXAMPLE}"))
    elif returns not in (None, type(None)):
        found.append(
            locator.at_param(
                method_name,
                "return",
                "a WebSocket endpoint returns None (send what it has to say with `await websocket.send_*`); "
                f"annotate `-> None` as in {_EXAMPLE}",
            )
        )
    return found
