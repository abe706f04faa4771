"""A forgotten ``await`` on a dependency's call: found in the source, and named at run time.

``self._chunker.run_remote(text)`` of an async endpoint is a coroutine, not the result;
without ``await`` the mistake shows up later as ``object of type 'coroutine' has no len()``
and a warning about a coroutine that was never awaited. The check reads each ``async def``
of a chainlet and reports every such call whose result is used without being awaited:
dropped, iterated, measured, indexed, returned, or kept in a name that is never awaited.
A call handed to another function (``asyncio.gather``, ``create_task``, ``list.append``) or
collected into a list is taken as awaited later, so correct code is never reported.

What the check cannot see (a call through an alias, a helper of another module) still gets
a clear message at run time: :class:`PendingCall` is what ``run_local``'s stubs return, and
:class:`StubCall` what a deployed chainlet's generated stubs return (:func:`awaited`); every
misuse of either, and its end unawaited, says ``did you forget `await ...`?``.
"""

from __future__ import annotations

import ast
import builtins
import functools
import inspect
import linecache
import sys
import textwrap
import types
import warnings
from collections.abc import Callable, Coroutine, Generator, Iterable
from typing import Any, NoReturn, ParamSpec, TypeVar

from chains.errors import Violation
from chains.model import ChainletSpec
from chains.source_map import in_user_files

__all__ = ["PendingCall", "StubCall", "awaited", "unawaited_calls"]

T = TypeVar("T")
P = ParamSpec("P")

# Builtins take a coroutine as a value (``len``, ``list``, ``print``): never a way to await it.
_BUILTINS = frozenset(name for name in dir(builtins) if not name.startswith("_"))


def unawaited_calls(specs: Iterable[ChainletSpec]) -> list[Violation]:
    """Every call of an async dependency's ``run_remote`` in an ``async def`` of ``specs``
    whose result is used without ``await``, with its file and line."""
    found: list[Violation] = []
    for spec in specs:
        awaitable = {
            dep.param: dep.chainlet_cls.__name__
            for dep in spec.dependencies
            if _needs_await(dep.chainlet_cls, specs)
        }
        if awaitable:
            found.extend(_check_class(spec.cls, awaitable))
    return found


def _needs_await(cls: type, specs: Iterable[ChainletSpec]) -> bool:
    endpoint = next((s.endpoint for s in specs if s.cls is cls), None)
    return (
        endpoint is not None
        and endpoint.is_async
        and not endpoint.is_stream
        and not endpoint.output_kind.is_socket  # `async with stub.run_remote() as ws`
    )


def _check_class(cls: type, awaitable: dict[str, str]) -> list[Violation]:
    try:
        lines, start = inspect.getsourcelines(cls)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):
        return []  # no source to read (a class made in a REPL): the run-time message remains
    node = next((n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)), None)
    if node is None:
        return []
    methods = [m for m in node.body if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef)]
    init = next((m for m in methods if m.name == "__init__"), None)
    attributes = _dependency_attributes(init, awaitable) if init is not None else {}
    path = inspect.getsourcefile(cls) or cls.__module__
    found: list[Violation] = []
    for method in methods:
        if not isinstance(method, ast.AsyncFunctionDef):
            continue
        for call, attribute in _unawaited(method, attributes):
            expression = f"self.{attribute}.run_remote(...)"
            found.append(
                Violation(
                    path,
                    start + call.lineno - 1,
                    f"{cls.__name__}.{method.name}",
                    f"`{expression}` is not awaited: {attributes[attribute]}.run_remote is async, "
                    f"so without `await` this is a coroutine, not its result; "
                    f"did you forget `await {expression}`?",
                )
            )
    return found


def _dependency_attributes(
    init: ast.FunctionDef | ast.AsyncFunctionDef, awaitable: dict[str, str]
) -> dict[str, str]:
    """``{"_chunker": "Chunker"}`` for each ``self._chunker = chunker`` of a dependency parameter."""
    found: dict[str, str] = {}
    for node in ast.walk(init):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        attribute = _self_attribute(target)
        if isinstance(value, ast.Name) and value.id in awaitable and attribute is not None:
            found[attribute] = awaitable[value.id]
    return found


def _self_attribute(node: ast.expr) -> str | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    return None


def _own_nodes(method: ast.AsyncFunctionDef) -> list[ast.AST]:
    """The nodes of ``method``'s own body: a function or lambda defined in it is a scope of its
    own, whose calls may well be awaited by whoever calls it."""
    found: list[ast.AST] = []
    pending: list[ast.AST] = list(ast.iter_child_nodes(method))
    while pending:
        node = pending.pop()
        found.append(node)
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            pending.extend(ast.iter_child_nodes(node))
    return found


def _unawaited(method: ast.AsyncFunctionDef, attributes: dict[str, str]) -> Iterable[tuple[ast.Call, str]]:
    nodes = _own_nodes(method)
    parents = {child: parent for parent in [method, *nodes] for child in ast.iter_child_nodes(parent)}
    for node in sorted((n for n in nodes if isinstance(n, ast.Call)), key=lambda n: (n.lineno, n.col_offset)):
        if not isinstance(node.func, ast.Attribute):
            continue
        attribute = _self_attribute(node.func.value) if node.func.attr == "run_remote" else None
        if attribute in attributes and not _awaited(node, nodes, parents):
            yield node, attribute or ""


def _awaited(node: ast.expr, nodes: list[ast.AST], parents: dict[ast.AST, ast.AST]) -> bool:
    """Whether the coroutine ``node`` makes is awaited here or handed on to be awaited."""
    parent = parents.get(node)
    if isinstance(parent, ast.Assign | ast.AnnAssign):
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        names = [t.id for t in targets if isinstance(t, ast.Name)]
        if len(names) != len(targets):
            return True  # kept in an attribute or an item: awaited elsewhere, for all we know
        uses = [n for n in nodes if isinstance(n, ast.Name) and n.id in names and isinstance(n.ctx, ast.Load)]
        return any(_use_awaits(use, parents) for use in uses)
    return _use_awaits(node, parents)


def _use_awaits(node: ast.expr, parents: dict[ast.AST, ast.AST]) -> bool:
    parent = parents.get(node)
    if isinstance(parent, ast.Await | ast.Starred | ast.List | ast.Tuple | ast.Set | ast.Dict):
        return True
    if isinstance(parent, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp):
        return True  # an element, gathered later; a comprehension's source is its ast.comprehension
    if isinstance(parent, ast.Call) and node is not parent.func:
        return not _is_builtin(parent)
    if isinstance(parent, ast.keyword):
        call = parents.get(parent)
        return not (isinstance(call, ast.Call) and _is_builtin(call))
    if isinstance(parent, ast.NamedExpr | ast.IfExp) and node is not getattr(parent, "test", None):
        return _use_awaits(parent, parents)
    # Dropped, returned, iterated, indexed, an attribute read, an operand, a condition.
    return False


def _is_builtin(call: ast.Call) -> bool:
    return isinstance(call.func, ast.Name) and call.func.id in _BUILTINS


class _Unawaited(Coroutine[Any, Any, T]):
    """A call's coroutine, made only when awaited, that names the fix when it is used as if
    it were the result or dropped without being awaited.

    It is a coroutine to asyncio (``await``, ``asyncio.gather``, ``create_task`` take it), so
    correct code does not notice it. The coroutine itself is made when first awaited: one made
    and dropped would warn in Python's words, naming the stub's internals.
    """

    __slots__ = ("_closed", "_coroutine")

    _coroutine: Coroutine[Any, Any, T] | None
    _closed: bool

    def _make(self) -> Coroutine[Any, Any, T]:
        raise NotImplementedError

    @property
    def hint(self) -> str:
        """What went wrong and the line that fixes it."""
        raise NotImplementedError

    def _report_dropped(self) -> None:
        warnings.warn(f"{self.hint} (the call never ran)", RuntimeWarning, stacklevel=3)

    # -- a coroutine to asyncio ------------------------------------------------------------

    def _started(self) -> Coroutine[Any, Any, T]:
        if self._coroutine is None:
            self._coroutine = self._make()
        return self._coroutine

    def send(self, value: Any) -> Any:
        return self._started().send(value)

    def throw(self, *args: Any) -> Any:
        return self._started().throw(*args)

    def close(self) -> None:
        if self._coroutine is not None:
            self._coroutine.close()
        self._closed = True

    def __await__(self) -> Generator[Any, None, T]:
        return self._started().__await__()

    def __del__(self) -> None:
        if getattr(self, "_coroutine", True) is None and not self._closed:
            self._report_dropped()

    # -- used as if it were the result -----------------------------------------------------

    def _misused(self, error: type[Exception] = TypeError) -> NoReturn:
        raise error(self.hint)

    def __getattr__(self, name: str) -> NoReturn:
        self._misused(AttributeError)

    def __len__(self) -> NoReturn:
        self._misused()

    def __iter__(self) -> NoReturn:
        self._misused()

    def __aiter__(self) -> NoReturn:
        self._misused()

    def __getitem__(self, key: object) -> NoReturn:
        self._misused()

    def __contains__(self, item: object) -> NoReturn:
        self._misused()

    def __bool__(self) -> NoReturn:
        self._misused()


class PendingCall(_Unawaited[T]):
    """The coroutine of a ``run_local`` dependency's call, which says ``did you forget
    `await ...`?`` when it is used as if it were the result, or dropped without being awaited.

    >>> async def run(text: str) -> str:
    ...     return text
    >>> pending = PendingCall(lambda: run("hi"), "Chunker", "self._chunker")
    >>> len(pending)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    TypeError: Chunker.run_remote(...) ...; did you forget `await self._chunker.run_remote(...)`?
    >>> pending.close()
    """

    __slots__ = ("_chainlet", "_expression", "_start")

    def __init__(
        self, start: Callable[[], Coroutine[Any, Any, T]], chainlet: str, expression: str | None = None
    ) -> None:
        self._start = start
        self._coroutine = None
        self._closed = False
        self._chainlet = chainlet
        self._expression = expression or "stub"

    @classmethod
    def of_caller(
        cls, start: Callable[[], Coroutine[Any, Any, T]], chainlet: str, stub: object
    ) -> PendingCall[T]:
        """Wrap the call ``start`` makes of ``stub``, named as the calling method spells it
        (``self._chunker``) when the stub is an attribute of the caller's ``self``."""
        frame = sys._getframe(2)  # the caller of the stub's run_remote
        owner = frame.f_locals.get("self")
        attribute = next((k for k, v in getattr(owner, "__dict__", {}).items() if v is stub), None)
        return cls(start, chainlet, f"self.{attribute}" if attribute is not None else None)

    def _make(self) -> Coroutine[Any, Any, T]:
        return self._start()

    @property
    def hint(self) -> str:
        """What went wrong and the line that fixes it."""
        return (
            f"{self._chainlet}.run_remote(...) was called without `await`, so this is a coroutine, "
            f"not its result; did you forget `await {self._expression}.run_remote(...)`?"
        )

    def __repr__(self) -> str:
        return f"<pending call of {self._chainlet}.run_remote(...): not awaited yet>"


# Python's "default" action for the dropped calls' warnings: once per calling line.
_REPORTED: dict[Any, Any] = {}


class StubCall(_Unawaited[T]):
    """The call of a generated stub's async method (see :func:`awaited`), which names the
    method, the caller's line and the fix when it is never awaited or used as its result.

    Only the caller's code object and instruction are kept per call: the line, the file (the
    user's, not a deployed copy's) and the call's text are read when something is reported.
    """

    __slots__ = ("_args", "_code", "_func", "_instruction", "_kwargs")

    def __init__(
        self,
        func: Callable[..., Coroutine[Any, Any, T]],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        code: types.CodeType,
        instruction: int,
    ) -> None:
        self._func = func
        self._args = args
        self._kwargs = kwargs
        self._code = code
        self._instruction = instruction
        self._coroutine = None
        self._closed = False

    def _make(self) -> Coroutine[Any, Any, T]:
        return self._func(*self._args, **self._kwargs)

    # The two paths of every call, written out: each Python call saved is a part of the cost.
    def __await__(self) -> Generator[Any, None, T]:
        coroutine = self._coroutine
        if coroutine is None:
            coroutine = self._coroutine = self._func(*self._args, **self._kwargs)
        return coroutine.__await__()

    def __del__(self) -> None:
        if self._coroutine is None and not self._closed:
            self._report_dropped()

    @property
    def _method(self) -> str:
        stub = self._args[0] if self._args else None
        owner = getattr(stub, "name", None) or type(stub).__name__
        return f"{owner}.{self._func.__name__}"

    def _site(self) -> tuple[str, int, str | None]:
        """The caller's file (as the user knows it), line, and the call as written there."""
        positions = list(self._code.co_positions())
        index = self._instruction // 2  # f_lasti counts bytes, two per code unit
        line, end_line, column, end_column = positions[index] if index < len(positions) else (None,) * 4
        filename = self._code.co_filename
        line = line or self._code.co_firstlineno
        call = None
        if end_line is not None and column is not None and end_column is not None:
            # Columns count UTF-8 bytes, from the first line's start to the last line's.
            lines = [linecache.getline(filename, n).encode() for n in range(line, end_line + 1)]
            lines[-1] = lines[-1][:end_column]
            lines[0] = lines[0][column:]
            call = _call_text(b"".join(lines).decode(errors="replace"))
        return _user_file(filename), line, call

    @property
    def hint(self) -> str:
        filename, line, call = self._site()
        fix = f"`await {call}`" if call else f"`await` on line {line}"
        return (
            f"{self._method}(...) was called without `await` at {filename}:{line}, so this is a "
            f"coroutine, not its result; did you forget {fix}?"
        )

    def _report_dropped(self) -> None:
        filename, line, _ = self._site()
        warnings.warn_explicit(
            f"{self.hint} (the call never ran)", RuntimeWarning, filename, line, registry=_REPORTED
        )

    def __repr__(self) -> str:
        return f"<pending call of {self._method}(...): not awaited yet>"


def _call_text(text: str) -> str | None:
    """``chunker.run_remote(...)`` for the source text ``chunker.run_remote(text, n=2)``."""
    try:
        node = ast.parse(f"({text.strip()})", mode="eval").body
    except SyntaxError:
        return None
    return f"{ast.unparse(node.func)}(...)" if isinstance(node, ast.Call) else None


def _user_file(filename: str) -> str:
    # A deployed chainlet runs a byte-for-byte copy of the chain's folder: name the user's file.
    mapped = in_user_files(f'File "{filename}"')
    return mapped[len('File "') : -1]


def awaited(func: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, Coroutine[Any, Any, T]]:
    """Make a stub's ``async def`` method say ``did you forget `await ...`?`` with the caller's
    file and line when a call of it is never awaited, instead of Python's warning about a
    coroutine of the stub's internals. The signature stays the same to callers and to mypy.

    The generated stubs use it on every async method that returns a value::

        class ChunkerStub(StubBase):
            @awaited
            async def run_remote(self, text: str) -> list[str]:
                result: list[str] = await self.call_remote(text=text)
                return result
    """

    @functools.wraps(func)
    def call(*args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, T]:
        caller = sys._getframe(1)
        return StubCall(func, args, kwargs, caller.f_code, caller.f_lasti)

    return call
