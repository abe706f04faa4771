"""The authoring API: ``ChainletBase``, ``ModelBase``, ``depends``, ``depends_context`` and
``mark_entrypoint``.

A class is checked when it is defined (:mod:`chains.checks`); what the checks read and make is
the data model (:mod:`chains.model`), which this module builds on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, TypeVar, cast, overload

from chains.checks import on_class_defined
from chains.context import DeploymentContext
from chains.model import Chainlet, ContextMarker, DependencyMarker, chainlet_name, is_abstract
from chains.rpc_options import DEFAULT_RETRIES, DEFAULT_TIMEOUT_SEC

__all__ = [
    "ChainletBase",
    "ModelBase",
    "construct",
    "depends",
    "depends_context",
    "entrypoint_marker",
    "mark_entrypoint",
]


ChainletT = TypeVar("ChainletT", bound=Chainlet)


def construct(cls: type[Chainlet], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Chainlet:
    """Run the class's own ``__new__``/``__init__`` with the arguments a builder chose, then a
    model's ``load()``."""
    instance: Chainlet = type.__call__(cls, *args, **kwargs)
    if isinstance(instance, ModelBase):
        instance.load()
    return instance


class _ClassName:
    """``Chainlet.name``: the class's own name, read from the class or an instance (Truss's)."""

    def __get__(self, instance: object, owner: type) -> str:
        return owner.__name__


class _DisplayName:
    """``Chainlet.display_name``: the name it is deployed under, ``RemoteConfig(name=...)`` or
    the class name."""

    def __get__(self, instance: object, owner: type[Chainlet]) -> str:
        return chainlet_name(owner)


class ChainletBase(Chainlet):
    """Base class of every chainlet: a Python class that runs as its own service.

    Subclasses define ``run_remote`` (the endpoint other chainlets call), optionally an
    ``__init__`` whose parameters are dependencies, and optionally ``is_healthy``::

        class Upper(chains.ChainletBase):
            async def run_remote(self, text: str) -> str:
                return text.upper()

    Each subclass is checked when it is defined (see ``chains check``).
    """

    _chains_abstract: ClassVar[bool] = True
    # Truss Chains' class attributes; a subclass may still define its own `name`.
    name = _ClassName()
    display_name = _DisplayName()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not is_abstract(cls):
            on_class_defined(cls)


class ModelBase(ChainletBase):
    """A Truss model class served as a chainlet: ``predict`` is its endpoint, and ``load()``,
    when defined, runs once after ``__init__``, before the first call (weights belong there).

    It is served on its own (a file whose only model it is needs no ``mark_entrypoint``) or
    called by chainlets through ``chains.depends``, like any chainlet::

        class Classifier(chains.ModelBase):
            def load(self) -> None:
                self._labels = ["cat", "dog"]

            async def predict(self, index: int) -> str:
                return self._labels[index]
    """

    _chains_abstract: ClassVar[bool] = True
    _chains_model: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # The endpoint rules, code generation and the server all work on run_remote: for a
        # model it is predict itself (same function, same signature and source lines).
        predict = cls.__dict__.get("predict")
        if predict is not None and "run_remote" not in cls.__dict__:
            cls.run_remote = predict  # type: ignore[attr-defined]
        super().__init_subclass__(**kwargs)

    def load(self) -> None:
        """Load what the model needs (weights, tokenizers); runs once, after ``__init__``."""


def depends(
    chainlet_cls: type[ChainletT],
    retries: int = DEFAULT_RETRIES,
    timeout_sec: float = DEFAULT_TIMEOUT_SEC,
    use_binary: bool = False,
    concurrency_limit: int | None = None,
    *,
    retry_user_errors: bool = False,
) -> ChainletT:
    """Declare a dependency on another chainlet as the default of an ``__init__`` parameter.

    At run time the parameter receives a stub with the same ``run_remote`` signature::

        def __init__(self, words: Words = chains.depends(Words, retries=3, timeout_sec=30)) -> None:
            self._words = words

    ``retries`` counts retries after the first attempt; ``timeout_sec`` bounds each attempt;
    ``concurrency_limit`` caps this caller's concurrent calls (streams included). The
    positional order is Truss Chains' (``chainlet_cls, retries, timeout_sec, use_binary,
    concurrency_limit``), and the annotation may be left out: ``words=chains.depends(Words)``.
    ``retry_user_errors=True`` retries an exception the callee raised, too, as Truss Chains
    does (off by default: see docs/concepts.md).
    """
    marker = DependencyMarker(
        chainlet_cls, retries, timeout_sec, concurrency_limit, use_binary, retry_user_errors
    )
    return cast(ChainletT, marker)


def depends_context() -> DeploymentContext:
    """Ask for the :class:`DeploymentContext` as the last ``__init__`` parameter::

    def __init__(self, context: chains.DeploymentContext = chains.depends_context()) -> None:
        self._token = context.secrets["hf_token"]
    """
    return cast(DeploymentContext, ContextMarker())


_ENTRYPOINT_ATTR = "__chains_entrypoint__"


@overload
def mark_entrypoint(cls: type[ChainletT], /) -> type[ChainletT]: ...
@overload
def mark_entrypoint(name: str, /) -> Callable[[type[ChainletT]], type[ChainletT]]: ...
def mark_entrypoint(
    target: type[ChainletT] | str, /
) -> type[ChainletT] | Callable[[type[ChainletT]], type[ChainletT]]:
    """Mark the chainlet that receives external calls; optionally name the chain.

    @chains.mark_entrypoint
    class Entry(chains.ChainletBase): ...

    @chains.mark_entrypoint("my-chain")
    class Other(chains.ChainletBase): ...
    """
    if isinstance(target, str):
        chain_name = target

        def mark(cls: type[ChainletT]) -> type[ChainletT]:
            setattr(cls, _ENTRYPOINT_ATTR, chain_name)
            return cls

        return mark
    setattr(target, _ENTRYPOINT_ATTR, "")
    return target


def entrypoint_marker(cls: type[Chainlet]) -> str | None:
    """``None`` for a chainlet that is not marked, else the chain name it was marked with."""
    value = cls.__dict__.get(_ENTRYPOINT_ATTR)
    return value if isinstance(value, str) else None
