"""The stub module of one dependency: a ``StubBase`` subclass with the dependency's signature.

How the body delegates depends on the endpoint:

* unary ``async def`` -> ``result: T = await self.call_remote(...)`` (a typed name, not a
  bare ``return``, so ``mypy --strict`` does not see ``Any`` returned), decorated with
  ``chains.await_check.awaited`` so that a call never awaited names the caller's line;
* unary ``def`` -> ``self.call_remote_sync(...)``;
* a stream annotated ``AsyncIterator[T]`` (or ``Annotated[AsyncIterator[bytes], TYPES]``) ->
  a plain ``def`` returning ``self.stream_remote(...)``, so closing the caller's iterator
  closes the HTTP response directly;
* a stream annotated ``AsyncGenerator[T, None]`` -> an ``async def`` re-yielding the items,
  since ``stream_remote`` is typed as an iterator, not a generator;
* a WebSocket endpoint -> ``def run_remote(self)`` returning ``self.connect_remote()``, the
  async context manager of the conversation (``async with stub.run_remote() as ws:``).

Arguments are passed by keyword, except positional-only ones.
"""

from __future__ import annotations

import collections.abc
import inspect
import json
import typing
from dataclasses import dataclass
from typing import Any

import jinja2

from chains.endpoint import EndpointSpec
from chains.errors import ChainsUsageError
from chains.model import ChainletSpec
from chains.routes import routes_of
from chains_codegen.annotations import ImportName, signature_source
from chains_codegen.imports import Imports
from chains_codegen.pysource import bracketed

__all__ = ["StubModule", "render_stub"]

_BODY_INDENT = "        "


@dataclass(frozen=True)
class StubModule:
    """A rendered stub module and what importing it involves."""

    module: str  # the module's name inside the stubs package
    chainlet: str
    class_name: str
    text: str
    imported_modules: frozenset[str]


def run_remote_of(cls: type) -> Any:
    """The ``run_remote`` function a chainlet class uses (its own or inherited)."""
    for klass in cls.__mro__:
        if "run_remote" in klass.__dict__:
            attr = klass.__dict__["run_remote"]
            return getattr(attr, "__func__", attr)
    raise ChainsUsageError(f"{cls.__qualname__} has no run_remote")  # the checks make this unreachable


def render_stub(
    env: jinja2.Environment,
    dependency: ChainletSpec,
    *,
    module: str,
    class_name: str,
    import_name: ImportName,
    first_party: set[str],
    header: str,
) -> StubModule:
    """Render ``chains_stubs/<module>.py`` for ``dependency``."""
    func = run_remote_of(dependency.cls)
    imports = Imports(first_party)
    imports.add_from("chains.stubs", "StubBase")
    if dependency.endpoint.output_kind.is_socket:
        return _render_socket_stub(env, dependency, imports, module, class_name, import_name, header)
    endpoint = dependency.endpoint
    # A batched chainlet is called with one input: its stub has the one-item signature.
    wire_types = (
        {**{p.name: p.annotation for p in endpoint.params}, "return": endpoint.signature.return_annotation}
        if endpoint.batching is not None
        else None
    )
    signature = signature_source(
        func,
        dependency.name,
        import_name,
        imports,
        reserved=frozenset({"StubBase", "awaited", class_name}),
        batched=wire_types,
    )
    returns_generator = _returns_async_generator(func)
    is_async = endpoint.is_async and (not endpoint.is_stream or returns_generator)
    # By keyword, except positional-only parameters: StubBase binds the arguments to the
    # stub's own signature, which refuses those by keyword.
    keywords = [
        p.name if p.kind is inspect.Parameter.POSITIONAL_ONLY else f"{p.name}={p.name}"
        for p in signature.params
    ]
    if not endpoint.is_stream:
        result = _free_name("result", {p.name for p in signature.params})
        call = "await self.call_remote(" if endpoint.is_async else "self.call_remote_sync("
        body = bracketed(
            f"{_BODY_INDENT}{result}: {signature.returns} = {call}", keywords, ")", indent=_BODY_INDENT
        )
        body.append(f"{_BODY_INDENT}return {result}")
    elif returns_generator:
        item = _free_name("item", {p.name for p in signature.params})
        body = bracketed(
            f"{_BODY_INDENT}async for {item} in self.stream_remote(", keywords, "):", indent=_BODY_INDENT
        )
        body.append(f"{_BODY_INDENT}    yield {item}")
    else:
        body = bracketed(f"{_BODY_INDENT}return self.stream_remote(", keywords, ")", indent=_BODY_INDENT)
    for route in routes_of(dependency.cls):
        body.append("")
        body.extend(_route_method(route.name, dependency, import_name, imports, class_name, route.endpoint))
    target_module = import_name(dependency.cls.__module__)
    def_lines = signature.def_lines(is_async=is_async, indent="    ")
    if is_async and not endpoint.is_stream:
        def_lines = _awaited(imports, def_lines)
    text = env.get_template("stub.py.jinja").render(
        header=header,
        dependency=dependency.name,
        target=f"{target_module}.{dependency.cls.__qualname__}",
        target_class=dependency.cls.__name__,
        class_name=class_name,
        imports=imports.lines(),
        def_lines=def_lines,
        body_lines=body,
    )
    return StubModule(module, dependency.name, class_name, text, frozenset(imports.top_modules()))


def _route_method(
    name: str,
    dependency: ChainletSpec,
    import_name: ImportName,
    imports: Imports,
    class_name: str,
    endpoint: EndpointSpec,
) -> list[str]:
    """A route's method in the stub: the route's signature, called by name (always awaited)."""
    func = getattr(dependency.cls, name)
    signature = signature_source(
        func, dependency.name, import_name, imports, reserved=frozenset({"StubBase", "awaited", class_name})
    )
    keywords = [json.dumps(name), *(f"{p.name}={p.name}" for p in signature.params)]
    lines = signature.def_lines(is_async=True, indent="    ", name=name)
    if endpoint.is_stream:
        imports.add_from("chains.stubs.methods", "stream_method")
        item = _free_name("item", {p.name for p in signature.params})
        lines += bracketed(
            f"{_BODY_INDENT}async for {item} in stream_method(",
            ["self", *keywords],
            "):",
            indent=_BODY_INDENT,
        )
        lines.append(f"{_BODY_INDENT}    yield {item}")
        return lines
    imports.add_from("chains.stubs.methods", "call_method")
    lines = _awaited(imports, lines)
    result = _free_name("result", {p.name for p in signature.params})
    lines += bracketed(
        f"{_BODY_INDENT}{result}: {signature.returns} = await call_method(",
        ["self", *keywords],
        ")",
        indent=_BODY_INDENT,
    )
    lines.append(f"{_BODY_INDENT}return {result}")
    return lines


def _render_socket_stub(
    env: jinja2.Environment,
    dependency: ChainletSpec,
    imports: Imports,
    module: str,
    class_name: str,
    import_name: ImportName,
    header: str,
) -> StubModule:
    """A WebSocket endpoint's stub: ``run_remote()`` opens the conversation."""
    imports.add_from("contextlib", "AbstractAsyncContextManager")
    imports.add_from("chains", "WebSocketProtocol")
    text = env.get_template("stub.py.jinja").render(
        header=header,
        dependency=dependency.name,
        target=f"{import_name(dependency.cls.__module__)}.{dependency.cls.__qualname__}",
        target_class=dependency.cls.__name__,
        class_name=class_name,
        imports=imports.lines(),
        def_lines=["    def run_remote(self) -> AbstractAsyncContextManager[WebSocketProtocol]:"],
        body_lines=[f"{_BODY_INDENT}return self.connect_remote()"],
    )
    return StubModule(module, dependency.name, class_name, text, frozenset(imports.top_modules()))


def _awaited(imports: Imports, def_lines: list[str]) -> list[str]:
    """``def_lines`` of a method returning a coroutine, under ``@awaited``: a call of it never
    awaited then names the caller's file and line rather than the stub's internals."""
    imports.add_from("chains.await_check", "awaited")
    return ["    @awaited", *def_lines]


def _returns_async_generator(func: Any) -> bool:
    hint = typing.get_type_hints(func, include_extras=True).get("return")
    if typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    return typing.get_origin(hint) is collections.abc.AsyncGenerator


def _free_name(name: str, taken: set[str]) -> str:
    while name in taken:
        name += "_"
    return name
