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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
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


class _ChainletMeta(type):
    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        builder = _builder.get()
        if builder is None:
            raise ChainsRuntimeError(
                f"chainlet {cls.__name__!r} cannot be constructed directly: its dependencies are "
                f"injected by chains. In tests use `with chains.run_local(): {cls.__name__}()`; "
                "to serve it use `chains push`."
            )
        return builder(cast(type[Chainlet], cls), args, kwargs)


class Chainlet(metaclass=_ChainletMeta):
    """The root of every chainlet class: its config, and construction only through a builder.

    Authors subclass ``chains.ChainletBase``, never this class directly.
    """

    remote_config: ClassVar[RemoteConfig] = RemoteConfig()
    # A base the SDK offers (ChainletBase, ModelBase), not a chainlet of a chain.
    _chains_abstract: ClassVar[bool] = True


def is_abstract(cls: type) -> bool:
    """Whether ``cls`` is a base the SDK offers (``ModelBase``), not a chainlet of a chain."""
    return bool(cls.__dict__.get("_chains_abstract", False))


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
