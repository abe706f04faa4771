"""The data model of a chain: chainlet classes, their declared dependencies, and their checked specs.

A chain's author subclasses ``chains.ChainletBase`` (:mod:`chains.chainlet`), whose classes
are checked when they are defined; this module is what the checks read and what they make,
so that it knows nothing of the rules (:mod:`chains.checks`) nor of who applies them::

    spec = chains.checks.chainlet_spec(Entry)          # a ChainletSpec
    [dep.name for dep in spec.dependencies]            # its DependencySpecs
    chain = chains.checks.build_chain(Entry)           # a Chain, dependencies first

:class:`Chainlet` is the root of every chainlet class; ``ChainletBase`` adds the checks on
definition to it.
"""

from __future__ import annotations

import contextvars
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import Any, ClassVar, cast

from chains.config import RemoteConfig
from chains.endpoint import EndpointSpec
from chains.errors import ChainsRuntimeError
from chains.rpc_options import DEFAULT_RETRIES, DEFAULT_TIMEOUT_SEC, option_problems

__all__ = [
    "Builder",
    "Chain",
    "Chainlet",
    "ChainletSpec",
    "ContextMarker",
    "DependencyMarker",
    "DependencySpec",
    "building_with",
    "chainlet_name",
    "is_abstract",
    "is_model",
]

Builder = Callable[[type["Chainlet"], tuple[Any, ...], dict[str, Any]], "Chainlet"]
"""How a chainlet is constructed once its dependencies are chosen (run_local's, the server's)."""

# Who may build a chainlet right now: run_local and the server set a builder that injects
# dependencies; with none set, constructing a chainlet by hand is refused.
_builder: contextvars.ContextVar[Builder | None] = contextvars.ContextVar("chains_builder", default=None)


@contextmanager
def building_with(builder: Builder) -> Iterator[None]:
    """Let chainlets be constructed inside this block, each through ``builder``."""
    token = _builder.set(builder)
    try:
        yield
    finally:
        _builder.reset(token)


_NAIVE = "Chainlets cannot be naively instantiated"


class _ChainletMeta(type):
    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        caller = sys._getframe(1)
        where = _location(caller)
        inside = _running_chainlet(caller)
        if inside is not None:
            # Built inside another chainlet it would run in that chainlet's process, outside
            # the chain: no service, no stub, no retries; a dependency is what is meant.
            raise ChainsRuntimeError(
                f"{where}: {_NAIVE}: `{cls.__name__}()` is called inside {inside}. Declare it as a "
                f"dependency instead: `def __init__(self, {cls.__name__.lower()}="
                f"chains.depends({cls.__name__})) -> None`."
            )
        builder = _builder.get()
        if builder is None:
            raise ChainsRuntimeError(
                f"{where}: {_NAIVE}: chainlet {cls.__name__!r} cannot be constructed directly, its "
                f"dependencies are injected by chains. In tests use `with chains.run_local(): "
                f"{cls.__name__}()`; to serve it use `chains push`."
            )
        return builder(cast(type[Chainlet], cls), args, kwargs)


def _location(frame: FrameType) -> str:
    """Where ``frame`` is, as a traceback writes it: a served chainlet's log then shows the
    user's own file instead of its deployed copy (see :mod:`chains.source_map`)."""
    return f'File "{frame.f_code.co_filename}", line {frame.f_lineno}'


def _running_chainlet(frame: FrameType | None) -> str | None:
    """``Class.method (File "...", line N)`` of the chainlet method on the stack above
    ``frame``, if any.

    Construction is rare (once per chainlet), so walking the stack costs nothing that matters;
    it sees through helper functions, which a check of the direct caller alone would miss.
    """
    while frame is not None:
        code = frame.f_code
        if code.co_argcount and code.co_varnames[0] == "self":
            owner = frame.f_locals.get("self")
            if isinstance(owner, Chainlet):
                return f"{type(owner).__name__}.{code.co_name} ({_location(frame)})"
        frame = frame.f_back
    return None


class Chainlet(metaclass=_ChainletMeta):
    """The root of every chainlet class: its config, and construction only through a builder.

    Authors subclass ``chains.ChainletBase``, never this class directly.
    """

    remote_config: ClassVar[RemoteConfig] = RemoteConfig()
    # A base the SDK offers (ChainletBase, ModelBase), not a chainlet of a chain.
    _chains_abstract: ClassVar[bool] = True
    # A Truss model (ModelBase): its endpoint is `predict`, and it takes no dependencies.
    _chains_model: ClassVar[bool] = False


def is_abstract(cls: type) -> bool:
    """Whether ``cls`` is a base the SDK offers (``ModelBase``), not a chainlet of a chain."""
    return bool(cls.__dict__.get("_chains_abstract", False))


def is_model(cls: type) -> bool:
    """Whether ``cls`` is a Truss model class (a ``ModelBase`` subclass)."""
    return bool(getattr(cls, "_chains_model", False))


def chainlet_name(cls: type[Chainlet]) -> str:
    """The name a chainlet is deployed under: ``remote_config.name`` or the class name."""
    return cls.remote_config.name or cls.__name__


@dataclass(frozen=True)
class DependencyMarker:
    """The default value ``chains.depends(...)`` leaves in an ``__init__`` signature."""

    chainlet_cls: type[Chainlet]
    retries: int = DEFAULT_RETRIES
    timeout_sec: float = DEFAULT_TIMEOUT_SEC
    concurrency_limit: int | None = None
    use_binary: bool = False
    retry_user_errors: bool = False

    def problems(self) -> list[str]:
        """What is wrong with the arguments given to ``depends``, in plain words."""
        return option_problems(
            self.retries, self.timeout_sec, self.concurrency_limit, self.use_binary, self.retry_user_errors
        )

    def __getattr__(self, name: str) -> Any:
        # Only reached for an attribute the marker lacks: it was used as if it were the stub,
        # so ``depends()`` was called somewhere other than an ``__init__`` parameter's default.
        if name.startswith("__"):
            raise AttributeError(name)
        target = getattr(self.chainlet_cls, "__name__", repr(self.chainlet_cls))
        raise ChainsRuntimeError(
            f"{_location(sys._getframe(1))}: `chains.depends({target})` was used, "
            f"but not as an argument to the `__init__` of a chainlet, so there is no {target} "
            f"here (`.{name}` was asked for). Declare the dependency as the default of an "
            f"`__init__` parameter: `def __init__(self, dep=chains.depends({target})) -> None: "
            "self._dep = dep`."
        )


@dataclass(frozen=True)
class ContextMarker:
    """The default value ``chains.depends_context()`` leaves in an ``__init__`` signature."""


@dataclass(frozen=True)
class DependencySpec:
    """One ``__init__`` parameter filled with a stub for another chainlet."""

    param: str
    chainlet_cls: type[Chainlet]
    marker: DependencyMarker

    @property
    def name(self) -> str:
        return chainlet_name(self.chainlet_cls)


@dataclass(frozen=True)
class ChainletSpec:
    """A chainlet class that passed every check, with what its server and callers need."""

    cls: type[Chainlet]
    name: str
    endpoint: EndpointSpec
    dependencies: tuple[DependencySpec, ...]
    context_param: str | None
    has_is_healthy: bool

    @property
    def remote_config(self) -> RemoteConfig:
        return self.cls.remote_config


@dataclass(frozen=True)
class Chain:
    """The chainlets reachable from an entrypoint, dependencies before their callers."""

    name: str
    entrypoint: ChainletSpec
    chainlets: tuple[ChainletSpec, ...]

    def get(self, name: str) -> ChainletSpec:
        for spec in self.chainlets:
            if spec.name == name:
                return spec
        raise KeyError(name)
