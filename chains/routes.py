"""Endpoints at routes of the author's choice: ``@chains.route``, and the checked form of each.

An entrypoint (or any chainlet) keeps its ``run_remote`` and may declare more endpoints,
each a method with an HTTP method and a route of its own, so that clients written for
another API (OpenAI's, a webhook's) can call the chain as they are::

    class Front(chains.ChainletBase):
        async def run_remote(self, prompt: str) -> str: ...

        @chains.route("POST", "/v1/chat/completions")
        async def chat(
            self,
            body: ChatRequest,                                   # the whole JSON body
            user: Annotated[str | None, chains.Header()] = None, # the `user` header
        ) -> ChatResponse | AsyncIterator[chains.SSE]: ...

        @chains.route("GET", "/v1/models/{model}")
        async def model(self, model: str, verbose: Annotated[bool, chains.Query()] = False) -> Model: ...

A parameter named in the route's ``{...}`` is a path parameter; one marked
``chains.Query()`` or ``chains.Header()`` a query parameter or a header; the one left, a
pydantic model, is the request body. The answer is a value (JSON), a stream of any form
``run_remote`` may stream (an ``SSE`` stream goes out as bare events, as OpenAI's and most
event clients expect), or, for a coroutine annotated ``Model | AsyncIterator[T]``, whichever
the call returns. :func:`check_routes` holds the rules; the server (``chains.server.routes``),
the stubs (``chains.stubs.methods``) and run_local (``chains.local_routes``) serve and call
what it returns.
"""

from __future__ import annotations

import collections.abc
import enum
import inspect
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, get_args

import pydantic

from chains.endpoint import EndpointSpec, analyze_endpoint, type_label
from chains.errors import ChainsUsageError, Violation
from chains.locations import Locator
from chains.model import Chain
from chains.wire import ASYNC_REQUEST, ASYNC_RUN_REMOTE, HEALTHZ, METRICS, READYZ, RUN_REMOTE

__all__ = [
    "METHOD_CALLS",
    "ErrorBody",
    "HTTPError",
    "Header",
    "HttpMethod",
    "ParamSource",
    "Query",
    "RouteParam",
    "RouteSpec",
    "check_routes",
    "method_endpoints",
    "refuse_routes",
    "route",
    "routes_of",
]

HttpMethod = Literal["GET", "POST", "PUT", "PATCH", "DELETE"]
_METHODS: tuple[HttpMethod, ...] = get_args(HttpMethod)
_WITHOUT_BODY = ("GET", "DELETE")

METHOD_CALLS = "/_chains/methods/"
"""Where stubs call a route's method by name: ``POST /_chains/methods/<name>`` with every
argument by name in one JSON object, as ``/run_remote`` takes them."""

# Routes the server answers itself, and prefixes it owns.
_RESERVED = (
    RUN_REMOTE,
    HEALTHZ,
    READYZ,
    METRICS,
    ASYNC_RUN_REMOTE,
    "/openapi.json",
    "/docs",
    "/client.js",
    "/client.d.ts",
)
_RESERVED_PREFIXES = (METHOD_CALLS, "/stream_ticket", ASYNC_REQUEST)

# A route's method is also a method of its chainlet's stub (chains.stubs.StubBase), which must
# keep its own; tests/checks/test_route_rules.py checks this list against StubBase.
STUB_NAMES = frozenset(
    {
        "aclose",
        "call_remote",
        "call_remote_sync",
        "connect_remote",
        "endpoint",
        "from_url",
        "name",
        "options",
        "path",
        "predict_async",
        "predict_async_stream",
        "predict_sync",
        "run_remote",
        "stream_remote",
        "urls",
    }
)

_ATTR = "__chains_route__"
_SPECS = "__chains_routes__"
_PARAM = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_SEGMENT = re.compile(r"^[A-Za-z0-9._~!$&'()*+,;=:@-]*$")

ErrorBody = Callable[[int, str], tuple[int, Any]]
"""How a route answers an error: ``(status, message) -> (status, JSON body)``.

The server's own refusals (credentials, readiness, a malformed body) and an endpoint's
failures go through it, so that clients of another API see the errors they know (see
``chains.openai.error_body``); without it they are answered as ``run_remote``'s.
"""

F = TypeVar("F", bound=Callable[..., Any])


class ParamSource(enum.Enum):
    """Where a route's parameter comes from."""

    PATH = "path"
    QUERY = "query"
    HEADER = "header"
    BODY = "body"


@dataclass(frozen=True)
class Query:
    """Marks a route parameter as a query parameter: ``Annotated[int, chains.Query()] = 10``.

    ``name`` is its key in the query string when it is not the parameter's name.
    """

    name: str | None = None


@dataclass(frozen=True)
class Header:
    """Marks a route parameter as a request header: ``Annotated[str | None, chains.Header()] = None``.

    ``name`` is the header's name; by default the parameter's, ``_`` read as ``-``
    (``openai_organization`` reads ``OpenAI-Organization``).
    """

    name: str | None = None


class HTTPError(Exception):
    """Raised by a route's method to answer with ``status`` and ``body`` (JSON) as they are.

    >>> raise chains.HTTPError(404, {"error": {"message": "no such model"}})
    """

    def __init__(self, status: int, body: Any) -> None:
        super().__init__(status, body)
        self.status = status
        self.body = body


@dataclass(frozen=True)
class _Declaration:
    method: str
    path: str
    errors: ErrorBody | None


def route(method: HttpMethod, path: str, *, errors: ErrorBody | None = None) -> Callable[[F], F]:
    """Serve the decorated method at ``method path`` besides ``run_remote``.

    ``errors`` shapes the route's error answers (see :data:`ErrorBody`). The method keeps
    its signature: a stub calls it by name, and run_local as it is::

        @chains.route("POST", "/v1/embeddings", errors=chains.openai.error_body)
        async def embeddings(self, body: EmbeddingRequest) -> EmbeddingResponse: ...
    """

    def mark(func: F) -> F:
        setattr(func, _ATTR, _Declaration(str(method), str(path), errors))
        return func

    return mark


@dataclass(frozen=True)
class RouteParam:
    """One parameter of a route's method: where it comes from and under which name."""

    name: str
    source: ParamSource
    key: str  # the path parameter, query key or (lower-case) header name; the name for the body
    annotation: Any
    required: bool


@dataclass(frozen=True)
class RouteSpec:
    """A checked route: its method's parameters, and what it answers.

    ``endpoint`` takes every parameter by name (what stubs send to ``METHOD_CALLS``) and
    describes the answer; a route annotated ``Model | AsyncIterator[T]`` has the unary half
    there and the stream half in ``stream``.
    """

    name: str
    http_method: HttpMethod
    path: str
    params: tuple[RouteParam, ...]
    endpoint: EndpointSpec
    stream: EndpointSpec | None
    errors: ErrorBody | None
    pattern: re.Pattern[str]

    @property
    def body(self) -> RouteParam | None:
        return next((p for p in self.params if p.source is ParamSource.BODY), None)

    @property
    def either(self) -> bool:
        """The answer is a value or a stream, whichever the call returns."""
        return self.stream is not None

    def match(self, path: str) -> dict[str, str] | None:
        """The path parameters of ``path``, or None when it is not this route's."""
        found = self.pattern.fullmatch(path)
        return None if found is None else found.groupdict()

    def describe(self) -> str:
        """``POST /v1/chat/completions (async chat(body: ChatRequest) -> ChatResponse | stream of SSE)``"""
        signature = self.endpoint.describe()
        if self.stream is not None:
            signature += f" | stream of {type_label(self.stream.output_type)}"
        return f"{self.http_method} {self.path} ({signature})"


def routes_of(cls: type) -> tuple[RouteSpec, ...]:
    """The checked routes of a chainlet class that passed its checks (none for most)."""
    cached = cls.__dict__.get(_SPECS)
    if cached is None:
        cached, _, _ = check_routes(cls, cls.__name__, Locator(cls), final=True)
    return tuple(cached)


def refuse_routes(chain: Chain, where: str) -> None:
    """Raise ``ChainsUsageError`` when a chainlet of ``chain`` declares routes that
    ``where`` cannot serve (Truss models answer ``predict`` alone), naming them: the
    routes would otherwise be left out without a word."""
    found = [
        f"{spec.name}: {r.http_method} {r.path}" for spec in chain.chainlets for r in routes_of(spec.cls)
    ]
    if found:
        raise ChainsUsageError(
            f"{where} serves run_remote alone (a Truss model answers predict), but the chain declares "
            f"@chains.route endpoints ({'; '.join(found)}); push it to a target that serves them "
            "(local, docker, swarm, ray, or the kubernetes and compose exports)"
        )


def declared_routes(cls: type) -> list[tuple[str, Any]]:
    """The methods of ``cls`` (own or inherited) that ``@chains.route`` marked."""
    found: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        for name, attr in klass.__dict__.items():
            func = getattr(attr, "__func__", attr)
            if getattr(func, _ATTR, None) is not None:
                found[name] = func
            elif name in found:
                del found[name]  # overridden without the decorator: no longer a route
    return list(found.items())


def check_routes(
    cls: type, chainlet: str, locator: Locator, *, final: bool
) -> tuple[list[RouteSpec], list[Violation], bool]:
    """Check every ``@chains.route`` of ``cls``: the routes, the parameters, the answers.

    Returns the specs, the violations and whether a hint could not be resolved yet.
    """
    specs: list[RouteSpec] = []
    violations: list[Violation] = []
    deferred = False
    seen: dict[tuple[str, str], str] = {}
    for name, func in declared_routes(cls):
        declaration: _Declaration = getattr(func, _ATTR)
        problems, spec, later = _check_one(cls, chainlet, locator, name, func, declaration, final=final)
        violations.extend(problems)
        deferred = deferred or later
        if spec is None:
            continue
        shape = (spec.http_method, _PARAM.sub("{}", spec.path))
        other = seen.setdefault(shape, name)
        if other != name:
            violations.append(
                locator.at_method(
                    name,
                    f"route {spec.http_method} {spec.path} of `{name}` is also the route of `{other}`; "
                    "give each method a route of its own",
                )
            )
            continue
        specs.append(spec)
    if final and not violations:
        setattr(cls, _SPECS, tuple(specs))
    return specs, violations, deferred


def _check_one(
    cls: type,
    chainlet: str,
    locator: Locator,
    name: str,
    func: Any,
    declaration: _Declaration,
    *,
    final: bool,
) -> tuple[list[Violation], RouteSpec | None, bool]:
    def at(message: str) -> Violation:
        return locator.at_method(name, message)

    problems: list[Violation] = []
    method, path = declaration.method, declaration.path
    if method not in _METHODS:
        problems.append(at(f"@chains.route: method {method!r} is not one of {', '.join(_METHODS)}"))
    problems.extend(at(f"@chains.route: {problem}") for problem in _path_problems(path))
    if name in STUB_NAMES or name.startswith("_"):
        problems.append(
            at(
                f"`{name}` cannot be a route: routes are public methods besides run_remote, and not "
                f"named as what a stub has of its own ({', '.join(sorted(STUB_NAMES))}); rename it"
            )
        )
    if problems:
        return problems, None, False
    if inspect.isgeneratorfunction(func):
        return (
            [at("a route's stream must be an `async def` generator; this is a sync generator")],
            None,
            False,
        )
    try:
        hints = typing.get_type_hints(func, include_extras=True)
    except NameError as exc:
        if not final:
            return [], None, True
        return (
            [at(f"cannot resolve the annotations ({exc}); import or define the names they use")],
            None,
            False,
        )
    except Exception as exc:
        return [at(f"cannot resolve the annotations ({type(exc).__name__}: {exc})")], None, False

    if inspect.isasyncgenfunction(func) and _stream_half(hints.get("return")) is not None:
        return (
            [
                at(
                    f"`{name}` yields, so it always streams: annotate it `AsyncIterator[T]`, or make it a "
                    "coroutine that returns either a value or an async iterator"
                )
            ],
            None,
            False,
        )
    endpoint, stream, problems, later = method_endpoints(cls, chainlet, locator, name, hints, final=final)
    if later:
        return [], None, True
    if problems or endpoint is None:
        return problems, None, False
    if endpoint.output_kind.is_socket:
        return [at("a route cannot be a WebSocket endpoint; serve WebSockets from run_remote")], None, False
    params, param_problems = _params(endpoint, method, path, name, locator)
    problems.extend(param_problems)
    if problems:
        return problems, None, False
    spec = RouteSpec(
        name=name,
        http_method=typing.cast(HttpMethod, method),
        path=path,
        params=tuple(params),
        endpoint=endpoint,
        stream=stream,
        errors=declaration.errors,
        pattern=_pattern(path),
    )
    return [], spec, False


def method_endpoints(
    cls: type,
    chainlet: str,
    locator: Locator,
    name: str,
    hints: dict[str, Any],
    *,
    final: bool = True,
    stub: bool = False,
) -> tuple[EndpointSpec | None, EndpointSpec | None, list[Violation], bool]:
    """The endpoint of method ``name`` and, for ``Model | AsyncIterator[T]``, its stream half;
    the violations, and whether a hint is not resolved yet. Stubs describe their methods so."""
    returns = hints.get("return")
    stream_half = _stream_half(returns)
    unary_half: Any = None
    if stream_half is not None:
        rest = [a for a in typing.get_args(returns) if a is not stream_half]
        unary_half = rest[0] if len(rest) == 1 else typing.Union[tuple(rest)]  # noqa: UP007
    analysis = analyze_endpoint(
        cls, chainlet, locator, final=final, stub=stub, method_name=name, returns=unary_half
    )
    if analysis.deferred:
        return None, None, [], True
    problems = list(analysis.violations)
    stream: EndpointSpec | None = None
    if stream_half is not None and not problems:
        streamed = analyze_endpoint(
            cls, chainlet, locator, final=final, stub=True, method_name=name, returns=stream_half
        )
        problems.extend(streamed.violations)
        stream = streamed.spec
    return analysis.spec, stream, problems, False


def _stream_half(returns: Any) -> Any:
    """``AsyncIterator[T]`` of a ``Model | AsyncIterator[T]`` annotation, else None."""
    if typing.get_origin(returns) not in (typing.Union, types.UnionType):
        return None
    streams = [
        a
        for a in typing.get_args(returns)
        if typing.get_origin(a) in (collections.abc.AsyncIterator, collections.abc.AsyncGenerator)
    ]
    return streams[0] if len(streams) == 1 else None


def _path_problems(path: str) -> list[str]:
    if not path.startswith("/"):
        return [f"the route {path!r} must start with '/', e.g. '/v1/chat/completions'"]
    problems = []
    names = _PARAM.findall(path)
    if len(set(names)) != len(names):
        problems.append(f"the route {path!r} names a path parameter twice")
    for segment in path.split("/")[1:]:
        if not _PARAM.fullmatch(segment) and not _SEGMENT.match(segment):
            problems.append(
                f"the route {path!r} has a segment {segment!r} that is neither plain text nor one "
                "`{name}` parameter"
            )
    if path in _RESERVED or path.startswith(_RESERVED_PREFIXES):
        problems.append(
            f"the route {path!r} is the server's own (it serves {', '.join(_RESERVED)} and "
            f"{', '.join(p + '...' for p in _RESERVED_PREFIXES)}); choose another"
        )
    return problems


def _pattern(path: str) -> re.Pattern[str]:
    parts = []
    for segment in path.split("/")[1:]:
        found = _PARAM.fullmatch(segment)
        parts.append(f"(?P<{found.group(1)}>[^/]+)" if found else re.escape(segment))
    return re.compile("/" + "/".join(parts))


def _params(
    endpoint: EndpointSpec, method: str, path: str, name: str, locator: Locator
) -> tuple[list[RouteParam], list[Violation]]:
    in_path = set(_PARAM.findall(path))
    params: list[RouteParam] = []
    problems: list[Violation] = []

    def at(param: str, message: str) -> None:
        problems.append(locator.at_param(name, param, message))

    for p in endpoint.params:
        marker, bare = _marker(p.annotation)
        if p.name in in_path:
            if marker is not None:
                at(p.name, f"`{p.name}` is a path parameter of {path!r}; drop its {type(marker).__name__}()")
            params.append(RouteParam(p.name, ParamSource.PATH, p.name, bare, True))
        elif isinstance(marker, Query):
            params.append(RouteParam(p.name, ParamSource.QUERY, marker.name or p.name, bare, p.required))
        elif isinstance(marker, Header):
            key = (marker.name or p.name.replace("_", "-")).lower()
            params.append(RouteParam(p.name, ParamSource.HEADER, key, bare, p.required))
        elif isinstance(bare, type) and issubclass(bare, pydantic.BaseModel):
            params.append(RouteParam(p.name, ParamSource.BODY, p.name, bare, p.required))
        else:
            at(
                p.name,
                f"`{p.name}: {type_label(p.annotation)}` is not in the route {path!r}, not marked "
                "chains.Query() or chains.Header(), and not a pydantic model (the request body): "
                f"say where it comes from, e.g. `{p.name}: Annotated[{type_label(bare)}, chains.Query()]`",
            )
    bodies = [p.name for p in params if p.source is ParamSource.BODY]
    if len(bodies) > 1:
        at(
            bodies[1],
            f"`{name}` takes {len(bodies)} pydantic models ({', '.join(bodies)}) but a request has one "
            "body; make one model of them, or mark the others chains.Query()/chains.Header()",
        )
    if bodies and method in _WITHOUT_BODY:
        at(bodies[0], f"a {method} request has no body; take `{bodies[0]}` with POST, PUT or PATCH")
    for missing in sorted(in_path - {p.name for p in endpoint.params}):
        problems.append(
            locator.at_method(name, f"the route {path!r} names {{{missing}}}, which `{name}` does not take")
        )
    return params, problems


def _marker(annotation: Any) -> tuple[Query | Header | None, Any]:
    if typing.get_origin(annotation) is not typing.Annotated:
        return None, annotation
    bare, *metadata = typing.get_args(annotation)
    return next((m for m in metadata if isinstance(m, Query | Header)), None), bare
