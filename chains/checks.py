"""The static checks: every rule a chainlet and a chain must follow, reported all together.

A chainlet class is checked when it is defined. Hints that name something defined later in
the file are checked again when the chain is loaded (``chains check``/``push``/``generate``
and ``run_local``). While a file is being loaded the checks collect violations instead of
raising at the first class, so one run reports every problem in the file.
"""

from __future__ import annotations

import contextvars
import inspect
import re
import typing
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from chains.await_check import unawaited_calls
from chains.config import RemoteConfig
from chains.context import DeploymentContext
from chains.endpoint import EndpointSpec, analyze_endpoint, type_label
from chains.errors import ChainsUsageError, Violation
from chains.locations import Locator
from chains.model import (
    Chain,
    Chainlet,
    ChainletSpec,
    ContextMarker,
    DependencyMarker,
    DependencySpec,
    chainlet_name,
    is_abstract,
    is_model,
)
from chains.routes import check_routes
from chains.truss_compat.names import written_name

__all__ = [
    "NAME_RE",
    "build_chain",
    "chainlet_spec",
    "check_chainlet",
    "collecting_violations",
    "on_class_defined",
]

NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")

_SPEC_ATTR = "__chains_spec__"
_DEFINITION_ATTR = "__chains_definition__"

# Set while a chain file is imported by the loader: definition-time violations go here.
_collector: contextvars.ContextVar[list[Violation] | None] = contextvars.ContextVar(
    "chains_violations", default=None
)


@contextmanager
def collecting_violations() -> Iterator[list[Violation]]:
    """Collect definition-time violations instead of raising them (used by the loader)."""
    found: list[Violation] = []
    token = _collector.set(found)
    try:
        yield found
    finally:
        _collector.reset(token)


def on_class_defined(cls: type[Chainlet]) -> None:
    """Run the checks that can run now; called by ``ChainletBase.__init_subclass__``."""
    violations, deferred, _ = _check_class(cls, final=False)
    setattr(cls, _DEFINITION_ATTR, (tuple(violations), deferred))
    collector = _collector.get()
    if collector is not None:
        collector.extend(violations)
    elif violations:
        raise ChainsUsageError(violations=violations)


def check_chainlet(cls: type[Chainlet]) -> tuple[ChainletSpec | None, list[Violation]]:
    """All checks of one chainlet class, with every hint resolved."""
    cached = cls.__dict__.get(_SPEC_ATTR)
    if isinstance(cached, ChainletSpec):
        return cached, []
    definition = cls.__dict__.get(_DEFINITION_ATTR)
    if definition is not None and definition[0]:
        return None, list(definition[0])
    spec, violations = _check_class_final(cls)
    if spec is not None:
        setattr(cls, _SPEC_ATTR, spec)
    return spec, violations


def chainlet_spec(cls: type[Chainlet]) -> ChainletSpec:
    """The checked spec of ``cls``; raises :class:`ChainsUsageError` listing what is wrong."""
    spec, violations = check_chainlet(cls)
    if spec is None:
        raise ChainsUsageError(violations=violations)
    return spec


def _check_class(cls: type[Chainlet], *, final: bool) -> tuple[list[Violation], bool, EndpointSpec | None]:
    locator = Locator(cls)
    violations: list[Violation] = []
    config = cls.__dict__.get("remote_config", cls.remote_config)
    name = cls.__name__
    if not isinstance(config, RemoteConfig):
        violations.append(
            locator.at_class(f"remote_config must be a chains.RemoteConfig(...), got {type(config).__name__}")
        )
    else:
        name = config.name or cls.__name__
        if not NAME_RE.match(name):
            violations.append(
                locator.at_class(
                    f"chainlet name {name!r} must start with a letter and hold only letters, "
                    "digits, '_' and '-'; set RemoteConfig(name=...)"
                )
            )
    init_violations, init_deferred = _check_init(cls, locator, final=final)
    if is_model(cls) and _find("predict", cls) is None:
        # Its endpoint is predict: the rules of run_remote would only repeat that it is missing.
        violations.append(
            locator.at_class(
                "MODELs must have a `predict` method. Define `async def predict(self, ...) -> ...`, "
                "or subclass chains.ChainletBase to serve `run_remote` instead"
            )
        )
        return [*violations, *init_violations, *_check_is_healthy(cls, locator)], init_deferred, None
    endpoint = analyze_endpoint(cls, name, locator, final=final)
    violations.extend(endpoint.violations)
    if endpoint.spec is not None and isinstance(config, RemoteConfig):
        violations.extend(_check_transport(config, endpoint.spec, locator))
    violations.extend(init_violations)
    violations.extend(_check_is_healthy(cls, locator))
    _, route_violations, routes_deferred = check_routes(cls, name, locator, final=final)
    violations.extend(route_violations)
    return violations, endpoint.deferred or init_deferred or routes_deferred, endpoint.spec


def _check_class_final(cls: type[Chainlet]) -> tuple[ChainletSpec | None, list[Violation]]:
    violations, _, endpoint = _check_class(cls, final=True)
    if violations or endpoint is None:
        return None, violations
    dependencies, context_param = _init_parts(cls)
    spec = ChainletSpec(
        cls=cls,
        name=chainlet_name(cls),
        endpoint=endpoint,
        dependencies=tuple(dependencies),
        context_param=context_param,
        has_is_healthy=_find("is_healthy", cls) is not None,
    )
    return spec, []


# Truss Chains' names of `ChainletOptions.transport` kinds, which its users know them by.
_TRANSPORTS = {"http": "HTTPOptions", "websocket": "WebsocketOptions", "grpc": "GRPCOptions"}


def _check_transport(config: RemoteConfig, endpoint: EndpointSpec, locator: Locator) -> list[Violation]:
    """``options.transport`` must fit the endpoint: the Truss export writes it as given."""
    transport = config.options.transport
    if transport is None:
        return []
    kind = transport.get("kind") if isinstance(transport, dict) else getattr(transport, "kind", None)
    if kind not in _TRANSPORTS:
        return [
            locator.at_class(
                f"`options.transport` must be one of {', '.join(repr({'kind': k}) for k in _TRANSPORTS)}, "
                f"got {transport!r}"
            )
        ]
    got = _TRANSPORTS[kind]
    if endpoint.output_kind.is_socket and kind != "websocket":
        return [
            locator.at_class(
                f"`options.transport` must be `WebsocketOptions`, got `{got}`: run_remote takes a "
                "WebSocket; use transport={'kind': 'websocket'} or leave it out"
            )
        ]
    if not endpoint.output_kind.is_socket and kind == "websocket":
        return [
            locator.at_class(
                "WebsocketOptions can only be used for websocket endpoints: run_remote takes no "
                "WebSocket; leave `options.transport` out (or use {'kind': 'http'})"
            )
        ]
    return []


def _find(name: str, cls: type) -> tuple[type, Any] | None:
    """The class in the MRO (below the SDK's bases) that defines ``name``, and the attribute."""
    for klass in cls.__mro__:
        if is_abstract(klass) or klass is object:
            return None
        if name in klass.__dict__:
            return klass, klass.__dict__[name]
    return None


def _init_parameters(cls: type) -> tuple[Locator, list[inspect.Parameter], Any] | None:
    found = _find("__init__", cls)
    if found is None:
        return None
    owner, init = found
    if not inspect.isfunction(init):
        return None
    return Locator(owner), list(inspect.signature(init).parameters.values())[1:], init


def _check_init(cls: type, locator: Locator, *, final: bool) -> tuple[list[Violation], bool]:
    found = _init_parameters(cls)
    if found is None:
        return [], False
    locator, params, init = found
    violations: list[Violation] = []

    def at(param: str, message: str) -> None:
        violations.append(locator.at_param("__init__", param, message))

    try:
        hints = typing.get_type_hints(init)
    except NameError:
        if not final:
            return violations, True
        hints = {}
    context_params = [p.name for p in params if isinstance(p.default, ContextMarker)]
    for index, p in enumerate(params):
        if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            at(
                p.name,
                f"`{'*' if p.kind is inspect.Parameter.VAR_POSITIONAL else '**'}{p.name}` is not "
                "allowed; chainlet constructors take only dependencies and the context",
            )
            continue
        default = p.default
        if isinstance(default, ContextMarker):
            if index != len(params) - 1:
                at(p.name, f"the context parameter `{p.name}` must be the last parameter of __init__")
            elif len(context_params) > 1:
                at(p.name, "only one parameter may take chains.depends_context()")
            annotation = hints.get(p.name)
            if annotation is not None and annotation is not DeploymentContext:
                at(p.name, f"annotate `{p.name}` as chains.DeploymentContext, not {type_label(annotation)}")
            continue
        if p.name == "context" and index != len(params) - 1:
            at(
                p.name,
                "The init argument name `context` is reserved for the optional context argument, "
                "which must be trailing: make it the last parameter, "
                "`context: chains.DeploymentContext = chains.depends_context()`",
            )
            continue
        if p.name == "context":
            at(
                p.name,
                "If the chainlet uses context for initialization, it must have a `context` argument "
                "of type chains.DeploymentContext defaulting to `chains.depends_context()`",
            )
            continue
        if not isinstance(default, DependencyMarker):
            at(
                p.name,
                f"parameter `{p.name}` needs a default of `chains.depends(SomeChainlet)` or "
                "`chains.depends_context()`; chainlets are built by chains and take no other arguments",
            )
            continue
        target = default.chainlet_cls
        if is_model(cls):
            at(
                p.name,
                "The only supported argument to `__init__` for MODELs is the optional context "
                f"(`context=chains.depends_context()`); `{p.name}` depends on "
                f"{getattr(target, '__name__', target)}: subclass chains.ChainletBase to call "
                "other chainlets",
            )
            continue
        if not (isinstance(target, type) and issubclass(target, Chainlet)) or is_abstract(target):
            at(
                p.name,
                "`chains.depends` must be used with a Chainlet class as argument (a ChainletBase "
                f"subclass), got {_named(target)}",
            )
            continue
        for problem in default.problems():
            at(p.name, f"chains.depends({target.__name__}, ...): {problem}")
        # An unannotated dependency takes its class from the marker (Truss Chains' idiom).
        annotation = hints.get(p.name)
        if annotation is not None and not _annotation_accepts(annotation, target):
            written = locator.annotation_text("__init__", p.name) or type_label(annotation)
            at(
                p.name,
                f"`{p.name}` is annotated {written} but depends on {target.__name__}; "
                f"annotate it as {target.__name__}, one of its bases, or a typing.Protocol it satisfies",
            )
    return violations, False


def _named(value: Any) -> str:
    """``value`` as its author wrote it (``chains.RPCOptions`` for ``StubOptions``, its name in
    Truss files and chains' public names alike)."""
    written = written_name(value)
    if written is not None:
        return f"{written} (the options of a call, not a chainlet)"
    return repr(value)


def _annotation_accepts(annotation: Any, target: type) -> bool:
    if not isinstance(annotation, type):
        return False
    if getattr(annotation, "_is_protocol", False):
        return all(hasattr(target, member) for member in _protocol_members(annotation))
    return issubclass(target, annotation)


def _protocol_members(protocol: type) -> set[str]:
    members: set[str] = set()
    for klass in protocol.__mro__:
        if klass is object or klass is typing.Protocol or klass is typing.Generic:
            continue
        if not getattr(klass, "_is_protocol", False):
            continue
        members.update(getattr(klass, "__annotations__", {}))
        members.update(name for name in klass.__dict__ if not (name.startswith("__") and name.endswith("__")))
    members.discard("_is_protocol")
    return {m for m in members if not m.startswith("_abc_")}


def _init_parts(cls: type) -> tuple[list[DependencySpec], str | None]:
    found = _init_parameters(cls)
    if found is None:
        return [], None
    _, params, _ = found
    deps = [
        DependencySpec(p.name, p.default.chainlet_cls, p.default)
        for p in params
        if isinstance(p.default, DependencyMarker)
    ]
    context = next((p.name for p in params if isinstance(p.default, ContextMarker)), None)
    return deps, context


def _check_is_healthy(cls: type, locator: Locator) -> list[Violation]:
    found = _find("is_healthy", cls)
    if found is None:
        return []
    owner, method = found
    locator = Locator(owner) if owner is not cls else locator
    fix = "define it as `def is_healthy(self) -> bool`"
    if not inspect.isfunction(method):
        return [locator.at_class(f"is_healthy must be a method; {fix}")]
    params = list(inspect.signature(method).parameters)
    if params != ["self"]:
        return [locator.at_method("is_healthy", f"is_healthy takes only `self`; {fix}")]
    try:
        hints = typing.get_type_hints(method)
    except NameError:
        hints = {}
    if hints.get("return") is not bool:
        return [locator.at_method("is_healthy", f"is_healthy must be annotated `-> bool`; {fix}")]
    return []


def build_chain(entrypoint: type[Chainlet], name: str | None = None) -> Chain:
    """Check every chainlet reachable from ``entrypoint`` and the graph they form."""
    violations: list[Violation] = []
    specs: dict[type, ChainletSpec] = {}
    order: list[ChainletSpec] = []
    state: dict[type, str] = {}  # "visiting" while on the DFS path, "done" after

    def visit(cls: type[Chainlet], path: list[type[Chainlet]]) -> None:
        if state.get(cls) == "done":
            return
        if state.get(cls) == "visiting":
            cycle = [*path[path.index(cls) :], cls]
            violations.append(
                Locator(cls).at_class(
                    "dependency cycle: "
                    + " -> ".join(c.__name__ for c in cycle)
                    + "; chainlets must form a graph without cycles"
                )
            )
            return
        state[cls] = "visiting"
        spec, found = check_chainlet(cls)
        violations.extend(v for v in found if v not in violations)
        deps = spec.dependencies if spec is not None else _markers_of(cls)
        for dep in deps:
            visit(dep.chainlet_cls, [*path, cls])
        state[cls] = "done"
        if spec is not None:
            specs[cls] = spec
            order.append(spec)

    visit(entrypoint, [])
    seen: dict[str, type] = {}
    for spec in order:
        other = seen.setdefault(spec.name, spec.cls)
        if other is not spec.cls:
            violations.append(
                Locator(spec.cls).at_class(
                    f"chainlet name {spec.name!r} is also used by {other.__module__}.{other.__qualname__}; "
                    "names must be unique in a chain: rename one or set RemoteConfig(name=...)"
                )
            )
    violations.extend(unawaited_calls(order))
    if violations:
        raise ChainsUsageError(violations=violations)
    entry = specs[entrypoint]
    return Chain(name=name or entry.name, entrypoint=entry, chainlets=tuple(order))


def _markers_of(cls: type) -> list[DependencySpec]:
    """Dependencies of a class that failed its checks, so the graph walk can go on."""
    found = _init_parameters(cls)
    if found is None:
        return []
    return [
        DependencySpec(p.name, p.default.chainlet_cls, p.default)
        for p in found[1]
        if isinstance(p.default, DependencyMarker)
        and isinstance(p.default.chainlet_cls, type)
        and issubclass(p.default.chainlet_cls, Chainlet)
    ]
