"""What a chainlet's ``run_remote`` looks like on the wire: its inputs, its output, its stream kind.

``analyze_endpoint`` reads the method once, reports every rule it breaks, and otherwise gives
an :class:`EndpointSpec` that the codecs, the server, the stubs and the code generator share.
"""

from __future__ import annotations

import collections.abc
import functools
import inspect
import operator
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

import pydantic

from chains.batcher import BatchConfig
from chains.batching import batch_config_of
from chains.errors import Violation
from chains.locations import Locator
from chains.streaming import STRUCTURED, UNARY, WEBSOCKET, OutputKind, StreamTypes
from chains.streaming.kinds import stream_kind_for
from chains.websocket.signature import is_socket_annotation, is_socket_connection, websocket_violations
from chains.wire import WIRE_CONFIG, wire_adapter

__all__ = [
    "EndpointAnalysis",
    "EndpointSpec",
    "Param",
    "analyze_endpoint",
    "field_name",
    "type_label",
]

METHOD = "run_remote"
_RUN_REMOTE = METHOD


_ITERATOR_ORIGINS = (collections.abc.AsyncIterator, collections.abc.AsyncGenerator)
_SYNC_ITERATOR_ORIGINS = (
    collections.abc.Iterator,
    collections.abc.Generator,
    collections.abc.Iterable,
    collections.abc.AsyncIterable,
)


@dataclass(frozen=True)
class Param:
    """One argument of ``run_remote``."""

    name: str
    annotation: Any
    default: Any = inspect.Parameter.empty
    positional_only: bool = False

    @property
    def required(self) -> bool:
        return self.default is inspect.Parameter.empty


@dataclass(frozen=True)
class EndpointSpec:
    """The checked shape of a chainlet's endpoint.

    ``output_type`` is the return type of a unary endpoint and the item type of a stream
    (``str``, ``bytes``, :class:`SSE`, a serializable ``T``, or ``bytes`` for a structured
    stream, whose parts are described by ``stream_types``).
    """

    chainlet: str
    is_async: bool
    params: tuple[Param, ...]
    output_kind: OutputKind
    output_type: Any
    stream_types: StreamTypes[Any, Any, Any] | None = None
    signature: inspect.Signature = field(default_factory=inspect.Signature, compare=False)
    # Set for ``@chains.batched``: params and output are then those of one call (the wire
    # form), not the body's lists.
    batching: BatchConfig | None = None
    # The method this describes: ``run_remote``, or a route's (see chains/routes.py).
    method: str = METHOD

    @property
    def is_stream(self) -> bool:
        return self.output_kind.is_stream

    def call(self, method: Callable[..., Any], arguments: Mapping[str, Any]) -> Any:
        """``method(**arguments)``, passing positional-only parameters by position."""
        if not self.has_positional_only:
            return method(**arguments)
        positional = [arguments[p.name] for p in self.params if p.positional_only and p.name in arguments]
        named = {
            p.name: arguments[p.name] for p in self.params if not p.positional_only and p.name in arguments
        }
        return method(*positional, **named)

    @cached_property
    def has_positional_only(self) -> bool:
        """Whether a parameter is positional-only (looked at once, not on every call)."""
        return any(p.positional_only for p in self.params)

    @cached_property
    def input_model(self) -> type[pydantic.BaseModel]:
        """The pydantic model of the JSON object ``POST /run_remote`` takes."""
        name = self.chainlet if self.method == METHOD else f"{self.chainlet}_{self.method}"
        return _input_model(name, self.params)

    @cached_property
    def output_adapter(self) -> pydantic.TypeAdapter[Any]:
        """Validates and serializes a unary result, or one item of a typed item stream."""
        return wire_adapter(self.output_type)

    def describe(self) -> str:
        """A one-line signature for people: ``run_remote(prompt: str) -> stream of str``."""
        params = ", ".join(
            f"{p.name}: {type_label(p.annotation)}" + ("" if p.required else f" = {p.default!r}")
            for p in self.params
        )
        if self.output_kind.is_socket:
            socket = "(websocket: WebSocketProtocol) -> None (a WebSocket: messages both ways)"
            return f"async {self.method}{socket}"
        if not self.output_kind.is_stream:
            output = type_label(self.output_type)
        elif self.stream_types is not None:
            types = self.stream_types
            parts = [f"header {type_label(types.header_type)}"] if types.header_type is not None else []
            if types.footer_type is not None:
                parts.append(f"footer {type_label(types.footer_type)}")
            extra = f" ({', '.join(parts)})" if parts else ""
            output = f"structured stream of {type_label(types.item_type)}{extra}"
        else:
            output = f"stream of {type_label(self.output_type)}"
        prefix = "async " if self.is_async else ""
        batching = f" ({self.batching.describe()})" if self.batching is not None else ""
        return f"{prefix}{self.method}({params}) -> {output}{batching}"


def field_name(param: str) -> str:
    """The input model's field for ``param``: a parameter called e.g. ``json`` or ``copy``
    would shadow a BaseModel attribute, so it gets a trailing ``_`` and an alias."""
    return f"{param}_" if hasattr(pydantic.BaseModel, param) else param


def _input_model(chainlet: str, params: tuple[Param, ...]) -> type[pydantic.BaseModel]:
    fields: dict[str, Any] = {}
    for p in params:
        default = ... if p.required else p.default
        name = field_name(p.name)
        fields[name] = (p.annotation, default if name == p.name else pydantic.Field(default, alias=p.name))
    config = pydantic.ConfigDict(extra="forbid", populate_by_name=True, **WIRE_CONFIG)
    model: type[pydantic.BaseModel] = pydantic.create_model(f"{chainlet}Input", __config__=config, **fields)
    return model


@dataclass
class EndpointAnalysis:
    spec: EndpointSpec | None = None
    violations: list[Violation] = field(default_factory=list)
    # The hints name something not defined yet (a forward reference): check again at load.
    deferred: bool = False


def analyze_endpoint(
    cls: type,
    chainlet: str,
    locator: Locator,
    *,
    final: bool,
    stub: bool = False,
    method_name: str = METHOD,
    returns: Any = None,
) -> EndpointAnalysis:
    """Check ``cls.run_remote`` against the endpoint rules and describe it.

    For a stub (``stub=True``) the body is not the endpoint's: a stub's ``run_remote`` may
    return the stream of ``stream_remote`` instead of yielding, so the rules about ``yield``
    do not apply.

    ``method_name`` names another method than ``run_remote`` (a route's), and ``returns``
    stands in for its return annotation (one half of a route's ``Model | AsyncIterator[T]``).
    """
    METHOD = method_name  # the messages below name the method checked
    result = EndpointAnalysis()
    method = _find_method(cls, METHOD)
    if method is None:
        result.violations.append(
            locator.at_class(
                f"no `{METHOD}` method; define `async def {METHOD}(self, ...) -> ...` "
                "as the chainlet's endpoint"
            )
        )
        return result
    owner = next(c for c in cls.__mro__ if METHOD in c.__dict__)
    if owner is not cls:
        locator = Locator(owner)

    def at_def(message: str) -> Violation:
        return locator.at_method(METHOD, message)

    try:
        signature = inspect.signature(method)
    except (TypeError, ValueError) as exc:
        result.violations.append(at_def(f"cannot read the signature: {exc}"))
        return result
    all_params = list(signature.parameters.values())
    if (
        not all_params
        or all_params[0].name != "self"
        or all_params[0].kind
        not in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        )
    ):
        result.violations.append(
            at_def(
                f"`{METHOD}` must be an instance method taking `self` first, "
                f"e.g. `def {METHOD}(self, x: int)`"
            )
        )
        # Its other parameters and return are checked all the same: one run reports all.
        all_params.insert(0, inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY))

    hints, unresolved = _resolve_hints(method)
    if unresolved is not None:
        if not final:
            result.deferred = True
            return result
        result.violations.append(
            at_def(f"cannot resolve the annotations ({unresolved}); import or define the names they use")
        )
        return result

    if any(is_socket_annotation(hints.get(p.name)) for p in all_params[1:]) or (
        stub and is_socket_connection(hints.get("return"))
    ):
        return _websocket(result, method, chainlet, all_params[1:], hints, locator, signature, stub=stub)

    params = []
    for p in all_params[1:]:
        if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            stars = "*" if p.kind is inspect.Parameter.VAR_POSITIONAL else "**"
            result.violations.append(
                locator.at_param(
                    METHOD, p.name, f"`{stars}{p.name}` is not allowed; list each argument with its type"
                )
            )
            continue
        if p.name not in hints:
            result.violations.append(
                locator.at_param(METHOD, p.name, f"parameter `{p.name}` has no type annotation; add one")
            )
            continue
        if p.name.startswith("_"):
            result.violations.append(
                locator.at_param(
                    METHOD,
                    p.name,
                    f"parameter `{p.name}` starts with '_', which JSON field names cannot; rename it",
                )
            )
            continue
        annotation = hints[p.name]
        problem = _serialization_problem(annotation, "validation")
        if problem:
            label = locator.annotation_text(METHOD, p.name) or type_label(annotation)
            result.violations.append(
                locator.at_param(
                    METHOD,
                    p.name,
                    f"parameter `{p.name}` has type {label}, which cannot be sent over the "
                    f"wire ({problem}); use JSON-compatible types or pydantic models",
                )
            )
            continue
        params.append(Param(p.name, annotation, p.default, p.kind is inspect.Parameter.POSITIONAL_ONLY))

    if "return" not in hints:
        result.violations.append(
            locator.at_param(METHOD, "return", f"`{METHOD}` has no return annotation; add `-> ...`")
        )
        return result
    if returns is None:
        returns = hints["return"]
    batching = None if stub or method_name != _RUN_REMOTE else _batching_of(cls)
    if batching is not None:
        returns = _batch_returns_on_the_wire(returns)
    output = _classify_output(method, returns, locator, stub=stub, name=METHOD)
    result.violations.extend(output.violations)
    if result.violations or output.kind is None:
        return result
    spec = EndpointSpec(
        chainlet=chainlet,
        is_async=inspect.iscoroutinefunction(method) or inspect.isasyncgenfunction(method),
        params=tuple(params),
        output_kind=output.kind,
        output_type=output.item_type,
        stream_types=output.stream_types,
        signature=signature,
        method=METHOD,
    )
    if batching is not None:
        batched_spec, problems = _batched(spec, batching)
        result.violations.extend(at_def(problem) for problem in problems)
        result.spec = batched_spec
        return result
    result.spec = spec
    return result


def _batching_of(cls: type) -> BatchConfig | None:
    for klass in cls.__mro__:
        if METHOD in klass.__dict__:
            return batch_config_of(klass.__dict__[METHOD])
    return None


def _batched(spec: EndpointSpec, config: BatchConfig) -> tuple[EndpointSpec | None, list[str]]:
    """The wire form of a ``@chains.batched`` body: one input, one output per call."""
    shape = "`async def run_remote(self, inputs: list[In]) -> list[Out]`"
    problems = [f"@chains.batched(...): {problem}" for problem in config.problems()]
    if len(spec.params) != 1:
        names = ", ".join(f"`{p.name}`" for p in spec.params) or "none"
        problems.append(
            f"a batched {METHOD} takes exactly one parameter, the list of a batch's inputs ({shape}); "
            f"it has {len(spec.params)} ({names})"
        )
        return None, problems
    param = spec.params[0]
    item = _list_item(param.annotation)
    if item is None:
        problems.append(
            f"parameter `{param.name}` of a batched {METHOD} is annotated {type_label(param.annotation)}; "
            f"annotate it `list[...]`: the body gets the inputs of a whole batch ({shape})"
        )
    if not param.required or param.positional_only:
        problems.append(
            f"parameter `{param.name}` of a batched {METHOD} must be a plain parameter without a default"
        )
    if spec.output_kind is STRUCTURED:
        problems.append(f"a batched {METHOD} cannot produce a structured stream; yield `list[Out]` per step")
        return None, problems
    output = _list_item(spec.output_type)
    if output is None:
        if spec.is_stream:
            problems.append(
                f"a streaming batched {METHOD} yields one list per step, one output per input: "
                f"annotate it `AsyncIterator[list[...]]`, not AsyncIterator[{type_label(spec.output_type)}]"
            )
        else:
            problems.append(
                f"a batched {METHOD} returns one output per input, so its return annotation must be "
                f"`list[...]`, not {type_label(spec.output_type)} ({shape})"
            )
    if problems or item is None or output is None:
        return None, problems
    output = _without_exceptions(output)
    # Each caller's stream is of the kind its item type makes, as if it were the whole stream.
    kind: OutputKind = stream_kind_for(output) if spec.is_stream else UNARY
    single = Param(param.name, item)
    parameters = list(spec.signature.parameters.values())
    iterator: Any = collections.abc.AsyncIterator
    returns = iterator[output] if spec.is_stream else output
    signature = spec.signature.replace(
        parameters=[parameters[0], parameters[1].replace(annotation=item)], return_annotation=returns
    )
    wire = EndpointSpec(
        chainlet=spec.chainlet,
        is_async=True,  # a call waits for its batch, whether the body is async or not
        params=(single,),
        output_kind=kind,
        output_type=output,
        signature=signature,
        batching=config,
    )
    return wire, []


def _batch_returns_on_the_wire(returns: Any) -> Any:
    """``list[Out]`` for ``list[Out | SomeError]`` (also as a stream's step): the errors a body
    may put in place of outputs are not part of what goes over the wire."""
    item = _list_item(returns)
    if item is not None:
        return types.GenericAlias(list, (_without_exceptions(item),))
    origin: Any = typing.get_origin(returns)
    if origin in _ITERATOR_ORIGINS:
        args = typing.get_args(returns)
        step = _list_item(args[0]) if args else None
        if step is not None:
            return origin[(types.GenericAlias(list, (_without_exceptions(step),)), *args[1:])]
    return returns


def _list_item(annotation: Any) -> Any:
    """``T`` for ``list[T]`` (also under ``Annotated``), else None."""
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    if typing.get_origin(annotation) is list:
        args = typing.get_args(annotation)
        return args[0] if args else None
    return None


def _without_exceptions(output: Any) -> Any:
    """``Out`` for ``Out | SomeError``: an output that is an exception fails only its own call."""
    if typing.get_origin(output) not in (typing.Union, types.UnionType):
        return output
    kept = [a for a in typing.get_args(output) if not (isinstance(a, type) and issubclass(a, BaseException))]
    if not kept:
        return output
    return functools.reduce(operator.or_, kept)


def _websocket(
    result: EndpointAnalysis,
    method: Any,
    chainlet: str,
    params: list[inspect.Parameter],
    hints: dict[str, Any],
    locator: Locator,
    signature: inspect.Signature,
    *,
    stub: bool,
) -> EndpointAnalysis:
    if not stub:
        result.violations.extend(websocket_violations(method, params, hints, locator))
    if not result.violations:
        result.spec = EndpointSpec(chainlet, True, (), WEBSOCKET, None, signature=signature)
    return result


def _find_method(cls: type, name: str = METHOD) -> Any:
    for klass in cls.__mro__:
        if name in klass.__dict__:
            attr = klass.__dict__[name]
            return attr if inspect.isfunction(attr) else getattr(attr, "__func__", attr)
    return None


def _resolve_hints(func: Any) -> tuple[dict[str, Any], str | None]:
    try:
        return typing.get_type_hints(func, include_extras=True), None
    except NameError as exc:
        return {}, str(exc)
    except Exception as exc:  # a hint that evaluates but is not a type, e.g. a typo'd expression
        return {}, f"{type(exc).__name__}: {exc}"


@dataclass
class _Output:
    kind: OutputKind | None = None
    item_type: Any = None
    stream_types: StreamTypes[Any, Any, Any] | None = None
    violations: list[Violation] = field(default_factory=list)


def _classify_output(
    method: Any, annotation: Any, locator: Locator, *, stub: bool, name: str = METHOD
) -> _Output:
    METHOD = name  # the messages below name the method checked
    out = _Output()

    def fail(message: str) -> _Output:
        out.violations.append(locator.at_param(METHOD, "return", message))
        return out

    is_async_gen = inspect.isasyncgenfunction(method)
    is_sync_gen = inspect.isgeneratorfunction(method)
    has_yield = is_async_gen or is_sync_gen

    stream_types: StreamTypes[Any, Any, Any] | None = None
    inner = annotation
    if typing.get_origin(annotation) is typing.Annotated:
        inner, *metadata = typing.get_args(annotation)
        found = [m for m in metadata if isinstance(m, StreamTypes)]
        if found:
            stream_types = found[0]
    origin = typing.get_origin(inner) or inner
    is_iterator = origin in _ITERATOR_ORIGINS

    if is_sync_gen:
        return fail(
            "streaming endpoints must be `async def`: this is a sync generator; write "
            f"`async def {METHOD}(...) -> AsyncIterator[T]` and keep the `yield`"
        )
    if origin in _SYNC_ITERATOR_ORIGINS:
        return fail(
            f"{type_label(annotation)} is not a stream type; streaming endpoints must be `async def` and "
            "annotated `AsyncIterator[T]` or `AsyncGenerator[T, None]`"
        )
    if stub:
        has_yield = is_iterator
    if has_yield and not is_iterator:
        return fail(
            f"the body yields, so the return annotation must be `AsyncIterator[T]` (or "
            f"`AsyncGenerator[T, None]`), not {type_label(annotation)}"
        )
    if is_iterator and not has_yield:
        return fail(
            f"the return annotation is {type_label(annotation)} but the body has no `yield`; "
            "yield the items, or return a plain value with a non-iterator annotation"
        )
    if stream_types is not None and not is_iterator:
        return fail("a StreamTypes annotation belongs on `Annotated[AsyncIterator[bytes], <StreamTypes>]`")

    if not is_iterator:
        problem = _serialization_problem(annotation, "serialization")
        if problem:
            label = locator.annotation_text(METHOD, "return") or type_label(annotation)
            return fail(
                f"the return type {label} cannot be sent over the wire ({problem}); "
                "use JSON-compatible types or pydantic models"
            )
        out.kind, out.item_type = UNARY, annotation
        return out

    args = typing.get_args(inner)
    if not args:
        return fail(f"say what the stream yields: `AsyncIterator[T]`, not bare {type_label(inner)}")
    item = args[0]
    if origin is collections.abc.AsyncGenerator and len(args) > 1 and args[1] not in (None, type(None)):
        return fail("an endpoint generator cannot receive values: use `AsyncGenerator[T, None]`")
    if stream_types is not None:
        if item is not bytes:
            return fail(
                "a structured stream is annotated `Annotated[AsyncIterator[bytes], <StreamTypes>]`; its "
                f"generator yields the bytes of `writer.yield_*`, not {type_label(item)}"
            )
        out.kind, out.item_type, out.stream_types = STRUCTURED, bytes, stream_types
        return out
    kind = stream_kind_for(item)
    if kind.has_item_schema:  # typed items: their type must serialize
        problem = _serialization_problem(item, "serialization")
        if problem:
            return fail(
                f"the stream item type {type_label(item)} cannot be sent over the wire ({problem}); "
                "stream str, bytes, chains.SSE, or JSON-compatible types and pydantic models"
            )
    out.kind = kind
    out.item_type = item
    return out


def _serialization_problem(tp: Any, mode: Literal["validation", "serialization"]) -> str:
    """Why pydantic cannot put ``tp`` on the wire as JSON, or "" when it can."""
    if _holds_object(tp):
        # pydantic has a schema for it, yet a model sent as `object` arrives as a dict and a
        # bare object() does not serialize at all.
        return (
            "values typed `object` do not round-trip: a pydantic model arrives as a dict, other "
            "objects not at all; name the concrete type (a pydantic model, str, int, list[Model])"
        )
    try:
        wire_adapter(tp).json_schema(mode=mode)
    except pydantic.PydanticSchemaGenerationError:
        return "pydantic has no JSON schema for it"
    except pydantic.errors.PydanticInvalidForJsonSchema as exc:
        return str(exc).splitlines()[0]
    except pydantic.PydanticUserError as exc:
        return str(exc).splitlines()[0]
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return ""


def _holds_object(tp: Any) -> bool:
    return tp is object or any(_holds_object(arg) for arg in typing.get_args(tp))


def type_label(tp: Any) -> str:
    """A short readable name for a type hint: ``list[Token]``, ``AsyncIterator[str]``."""
    if tp is type(None) or tp is None:
        return "None"
    if typing.get_origin(tp) is typing.Annotated:
        # Constraints (pydantic.Field(...)) are for validation; a person reads the type.
        return type_label(typing.get_args(tp)[0])
    if isinstance(tp, type) and not typing.get_args(tp):
        return tp.__qualname__ if tp.__module__ != "builtins" else tp.__name__
    # Drop module paths: `list[my_chain.Token]` reads better as `list[Token]`.
    return re.sub(r"\b(?:[A-Za-z_]\w*\.)+([A-Za-z_]\w*)", r"\1", repr(tp))
