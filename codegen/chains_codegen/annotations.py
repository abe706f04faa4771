"""A dependency's ``run_remote`` signature as source text, with the imports it needs.

The generated stub must read as if written by hand, so each annotation and default is
taken from the user's own source (the AST of ``inspect.getsource``), not rebuilt from the
runtime objects. Each name those expressions use is imported where it really lives:

* a module -> ``import x`` (or ``import x as alias``);
* a class, function or typing object -> ``from <its module> import Name``, using the
  shortest parent package that exposes the same object (``from pydantic import BaseModel``);
  a class defined in the chain file comes from the chain file's module (its stem);
* any other module-level value (a ``StreamTypes`` such as ``TOKENS``, a constant) ->
  ``from <module> import NAME``, where the module is the one of ``run_remote``, or the one
  its ``from x import NAME`` line took it from (``mypy --strict`` refuses implicit re-exports).

Every expression is evaluated again against those imports and compared with the hint or
default Python holds, so a stub never silently disagrees with the chainlet it calls.

>>> imports = Imports()
>>> sig = signature_source(Greeter.run_remote, "Greeter", lambda m: "chain", imports)  # doctest: +SKIP
>>> sig.def_lines(is_async=True, indent="    ")                                       # doctest: +SKIP
['    async def run_remote(self, name: str, punctuation: str = "!") -> str:']
"""

from __future__ import annotations

import ast
import builtins
import collections.abc
import importlib.util
import inspect
import sys
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from chains.errors import ChainsUsageError
from chains.streaming import StreamTypes
from chains_codegen.imports import Imports
from chains_codegen.pysource import bracketed, expression

__all__ = ["ParamSource", "SignatureSource", "signature_source"]

ImportName = Callable[[str], str]
"""Maps a module's ``__name__`` to the name the generated code imports it by (or raises)."""

_LITERALS = {id(typing.Literal)}
_ANNOTATED = {id(typing.Annotated)}
try:  # typing_extensions has its own Literal and Annotated on some versions
    import typing_extensions

    _LITERALS.add(id(typing_extensions.Literal))
    _ANNOTATED.add(id(typing_extensions.Annotated))
except ImportError:  # pragma: no cover - pydantic depends on it
    pass


@dataclass(frozen=True)
class ParamSource:
    """One parameter of ``run_remote`` as source text."""

    name: str
    kind: inspect._ParameterKind
    annotation: str
    default: str | None = None

    def text(self) -> str:
        if self.default is None:
            return f"{self.name}: {self.annotation}"
        return f"{self.name}: {self.annotation} = {self.default}"


@dataclass(frozen=True)
class SignatureSource:
    """The parameters and return annotation of a ``run_remote``, ready to print."""

    params: tuple[ParamSource, ...]
    returns: str

    def def_lines(self, *, is_async: bool, indent: str, name: str = "run_remote") -> list[str]:
        """The ``def run_remote(self, ...) -> ...:`` line(s), split as ruff splits them."""
        items = ["self"]
        for index, param in enumerate(self.params):
            previous = self.params[index - 1].kind if index else inspect.Parameter.POSITIONAL_OR_KEYWORD
            if param.kind is inspect.Parameter.KEYWORD_ONLY and previous is not param.kind:
                items.append("*")
            items.append(param.text())
            following = self.params[index + 1].kind if index + 1 < len(self.params) else None
            if param.kind is inspect.Parameter.POSITIONAL_ONLY and following is not param.kind:
                items.append("/")
        prefix = "async def" if is_async else "def"
        return bracketed(f"{indent}{prefix} {name}(", items, f") -> {self.returns}:", indent=indent)


def signature_source(
    func: Any,
    chainlet: str,
    import_name: ImportName,
    imports: Imports,
    reserved: set[str] | frozenset[str] = frozenset(),
    batched: Mapping[str, Any] | None = None,
) -> SignatureSource:
    """Read ``func``'s parameters and return annotation from its source.

    Adds the imports they need to ``imports``; ``reserved`` holds names the generated
    module defines itself. Raises :class:`ChainsUsageError` naming ``chainlet`` when the
    signature cannot be reproduced, with what to change.

    For a ``@chains.batched`` body, ``batched`` holds the wire types of one call (by
    parameter name, and ``"return"``): the signature is then the one-item form, ``T`` for
    each ``list[T]``, without the exceptions a body may return in place of an output.
    """
    node = _function_node(func, chainlet)
    resolver = _Resolver(func, chainlet, import_name, imports, reserved)
    args = node.args
    positional = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    entries = [
        *zip(positional, defaults, strict=True),
        *zip(args.kwonlyargs, args.kw_defaults, strict=True),
    ][1:]  # without `self`
    signature = inspect.signature(func)
    expected = list(signature.parameters.values())[1:]
    if args.vararg or args.kwarg or [arg.arg for arg, _ in entries] != [p.name for p in expected]:
        raise ChainsUsageError(
            f"chainlet {chainlet}: the source of run_remote does not match its signature "
            f"({signature}); a decorator on run_remote must keep the signature (functools.wraps)"
        )
    params = []
    annotations: dict[str, str] = {}
    for (arg, default), runtime in zip(entries, expected, strict=True):
        if arg.annotation is None:
            raise ChainsUsageError(
                f"chainlet {chainlet}: parameter `{arg.arg}` of run_remote has no annotation"
            )
        what = f"the annotation of parameter `{arg.arg}`"
        node_annotation = arg.annotation
        if batched is not None:
            node_annotation = _list_item(node_annotation, resolver, what)
        annotation = resolver.annotation(node_annotation, what)
        annotations[arg.arg] = annotation
        default_text = None
        if default is not None:
            default_text = resolver.default(default, runtime.default, arg.arg)
        params.append(ParamSource(arg.arg, runtime.kind, annotation, default_text))
    if node.returns is None:
        raise ChainsUsageError(f"chainlet {chainlet}: run_remote has no return annotation")
    returns_node = node.returns
    if batched is not None:
        returns_node = _batch_returns(returns_node, resolver)
    returns = resolver.annotation(returns_node, "the return annotation")
    annotations["return"] = returns
    resolver.check_hints(annotations, expected=batched)
    return SignatureSource(tuple(params), returns)


def _function_node(func: Any, chainlet: str) -> ast.FunctionDef | ast.AsyncFunctionDef:
    # The whole file is parsed, not just the method's lines: a method whose body holds an
    # unindented multi-line string cannot be dedented and parsed on its own.
    target = inspect.unwrap(func)
    try:
        lines, _ = inspect.findsource(target)
        tree = ast.parse("".join(lines))
    except (OSError, TypeError, SyntaxError) as exc:
        raise ChainsUsageError(
            f"chainlet {chainlet}: cannot read the source of run_remote ({exc}); stubs are generated "
            "from the source file, so define the chainlet in a .py file"
        ) from None
    first_line = target.__code__.co_firstlineno
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.name == target.__name__
            and min([node.lineno, *(d.lineno for d in node.decorator_list)]) == first_line
        ):
            return node
    raise ChainsUsageError(f"chainlet {chainlet}: no `def {target.__name__}` in the source of run_remote")


class _Resolver:
    """Rewrites names in annotations and defaults to imported ones, and checks the result."""

    def __init__(
        self,
        func: Any,
        chainlet: str,
        import_name: ImportName,
        imports: Imports,
        reserved: set[str] | frozenset[str],
    ) -> None:
        self.func = func
        self.chainlet = chainlet
        self.globals: dict[str, Any] = func.__globals__
        self.import_name = import_name
        self.imports = imports
        self.reserved = reserved
        self.bound: dict[str, Any] = {}  # name in the generated module -> the object it holds
        self._renamed: dict[str, str] = {}  # name in the user's source -> expression replacing it

    # -- the two kinds of expression ---------------------------------------------------------

    def annotation(self, node: ast.expr, what: str) -> str:
        return expression(_TypeRewriter(self, what).visit(_parse_string(node, self, what)))

    def default(self, node: ast.expr, value: Any, param: str) -> str:
        what = f"the default of parameter `{param}`"
        text = expression(_NameRewriter(self, what).visit(node))
        try:
            again = eval(text, dict(self.bound))
            same = again is value or bool(again == value)
        except Exception:
            same = False
        if not same:
            raise ChainsUsageError(
                f"chainlet {self.chainlet}: {what} in run_remote ({ast.unparse(node)}) cannot be "
                f"reproduced in the generated stub (it evaluates to {value!r}); use a literal or a "
                "module-level constant"
            )
        return text

    def check_hints(self, texts: dict[str, str], expected: Mapping[str, Any] | None = None) -> None:
        """The rewritten annotations must mean exactly what Python resolved for ``func``
        (or ``expected``, when the stub's types are not the function's own)."""
        if expected is None:
            expected = typing.get_type_hints(self.func, include_extras=True)
        probe = _probe()
        try:
            probe.__annotations__ = {name: eval(text, dict(self.bound)) for name, text in texts.items()}
            actual = typing.get_type_hints(probe, include_extras=True)
        except Exception as exc:
            actual = {"<error>": exc}
        for name, text in texts.items():
            # Metadata such as pydantic.Field(gt=0) is rebuilt, not shared, and compares by
            # identity: an identical repr is the same value.
            if (
                actual.get(name) != expected.get(name)
                and repr(actual.get(name)) != repr(expected.get(name))
                and not _same_generic(actual.get(name), expected.get(name))
            ):
                where = "the return annotation" if name == "return" else f"the annotation of `{name}`"
                raise ChainsUsageError(
                    f"chainlet {self.chainlet}: {where} of run_remote ({text}) means "
                    f"{expected.get(name)!r} where it is defined but {actual.get(name, actual)!r} at "
                    "module level; the names in annotations must be module-level names of "
                    f"{self.func.__module__}, not class attributes or local variables"
                )

    # -- names -------------------------------------------------------------------------------

    def rename(self, name: str, what: str) -> str:
        """The expression that replaces ``name`` (a root name in the user's source)."""
        if name not in self._renamed:
            self._renamed[name] = self._bind(name, what)
        return self._renamed[name]

    def _bind(self, name: str, what: str) -> str:
        if name in self.globals:
            obj = self.globals[name]
        elif hasattr(builtins, name):
            obj = getattr(builtins, name)
        else:
            raise ChainsUsageError(
                f"chainlet {self.chainlet}: {what} of run_remote uses `{name}`, which is not a "
                f"module-level name of {self.func.__module__}; define or import it at module level "
                "so the generated stub can import it (a StreamTypes too: TOKENS = chains.stream_types(...) "
                "at the top level of the module, not in the class body or a function)"
            )
        if isinstance(obj, ModuleType):
            self._claim(name, obj, what)
            self.imports.add_module(self.import_name(obj.__name__), name)
            return name
        if name not in self.globals:  # a builtin constant such as Ellipsis
            return self._claim(name, obj, what)
        defining_module, qualname = _location(obj) or _imported_from(self.func.__module__, name, obj)
        first, dot, rest = qualname.partition(".")
        if defining_module == "builtins":
            return self._claim(first, getattr(builtins, first), what) + dot + rest
        target = getattr(sys.modules.get(defining_module), first, None)
        # The object's own name reads best; the user's alias only if that name is taken.
        binding = first if self._free(first, target) else name
        self._claim(binding, target, what)
        self.imports.add_from(self.import_name(defining_module), first, binding)
        return binding + dot + rest

    def _free(self, name: str, obj: Any) -> bool:
        if name in self.reserved:
            return False
        return name not in self.bound or self.bound[name] is obj

    def _claim(self, name: str, obj: Any, what: str) -> str:
        if not self._free(name, obj):
            raise ChainsUsageError(
                f"chainlet {self.chainlet}: {what} of run_remote uses the name `{name}`, which the "
                "generated stub module needs for something else; import it under another name"
            )
        self.bound[name] = obj
        return name


def _probe() -> Any:
    def probe() -> None:
        """Holds evaluated annotations so typing normalizes them as it did the user's."""

    return probe


def _location(obj: Any) -> tuple[str, str] | None:
    """Where ``obj`` is defined, as (module, qualname), via the shortest public parent package."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
        return None
    if _lookup(module, qualname) is not obj:
        return None
    parts = module.split(".")
    for end in range(1, len(parts)):
        parent = ".".join(parts[:end])
        if not any(p.startswith("_") for p in parts[:end]) and _lookup(parent, qualname) is obj:
            return parent, qualname
    return module, qualname


def _imported_from(module: str, name: str, obj: Any) -> tuple[str, str]:
    """Where a plain value (a constant, a StreamTypes) bound as ``module.name`` is defined.

    A value has no ``__module__`` of its own, so follow the ``from x import name`` lines of
    the module's source back to the module that defines it: importing it from a module that
    merely imports it too would be an implicit re-export, which ``mypy --strict`` refuses.
    """
    seen = set()
    while (module, name) not in seen:
        seen.add((module, name))
        source = _module_tree(module)
        found = None
        for node in source.body if source is not None else []:
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if (alias.asname or alias.name) == name:
                        found = (_absolute(node, module), alias.name)
        if found is None or _lookup(*found) is not obj:
            break
        module, name = found
    return module, name


def _module_tree(module: str) -> ast.Module | None:
    try:
        return ast.parse(inspect.getsource(sys.modules[module]))
    except (KeyError, OSError, TypeError, SyntaxError):
        return None


def _absolute(node: ast.ImportFrom, module: str) -> str:
    if not node.level:
        return node.module or ""
    package = getattr(sys.modules.get(module), "__package__", None) or ""
    return importlib.util.resolve_name("." * node.level + (node.module or ""), package)


def _lookup(module: str, qualname: str) -> Any:
    value: Any = sys.modules.get(module)
    for part in qualname.split("."):
        value = getattr(value, part, None)
    return value


def _parse_string(node: ast.expr, resolver: _Resolver, what: str) -> ast.expr:
    """A quoted annotation (``"Token"``) as the expression it holds."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            return ast.parse(node.value.strip(), mode="eval").body
        except SyntaxError:
            raise ChainsUsageError(
                f"chainlet {resolver.chainlet}: {what} of run_remote ({node.value!r}) is not a valid "
                "Python expression"
            ) from None
    return node


class _NameRewriter(ast.NodeTransformer):
    """Replaces each root name with the name (or dotted path) the generated module binds."""

    def __init__(self, resolver: _Resolver, what: str) -> None:
        self.resolver = resolver
        self.what = what

    def visit_Name(self, node: ast.Name) -> ast.expr:
        replacement = self.resolver.rename(node.id, self.what)
        return ast.parse(replacement, mode="eval").body


class _TypeRewriter(_NameRewriter):
    """Also parses quoted forward references, except inside ``Literal`` and ``Annotated`` metadata."""

    def visit_Constant(self, node: ast.Constant) -> ast.expr:
        parsed = _parse_string(node, self.resolver, self.what)
        return node if parsed is node else self.visit(parsed)

    def visit_Call(self, node: ast.Call) -> ast.expr:
        raise ChainsUsageError(
            f"chainlet {self.resolver.chainlet}: {self.what} of run_remote calls `{ast.unparse(node)}`, "
            "and a type is written with names, not calls; bind it to a module-level name and use that"
        )

    def visit_Subscript(self, node: ast.Subscript) -> ast.expr:
        origin = _evaluate(node.value, self.resolver)
        value = self.visit(node.value)
        assert isinstance(value, ast.expr)
        if id(origin) in _LITERALS:
            node.value = value
            node.slice = _NameRewriter(self.resolver, self.what).visit(node.slice)
            return node
        if id(origin) in _ANNOTATED and isinstance(node.slice, ast.Tuple) and node.slice.elts:
            first, *metadata = node.slice.elts
            for item in metadata:
                self._refuse_inline_stream_types(item)
            # Metadata is values, not types: `Field(gt=0)` may be called, strings stay strings.
            plain = _NameRewriter(self.resolver, self.what)
            node.slice.elts = [self.visit(first), *(plain.visit(m) for m in metadata)]
            node.value = value
            return node
        node.value = value
        node.slice = self.visit(node.slice)
        return node

    def _refuse_inline_stream_types(self, node: ast.expr) -> None:
        # Producer and consumer must share one StreamTypes object: the consumer reads the
        # stream with it, so it has to be importable by name.
        if any(isinstance(n, ast.Call) for n in ast.walk(node)) and isinstance(
            _evaluate(node, self.resolver), StreamTypes
        ):
            raise ChainsUsageError(
                f"chainlet {self.resolver.chainlet}: {self.what} of run_remote builds its StreamTypes "
                f"in place (`{ast.unparse(node)}`); bind it to a module-level name, "
                "e.g. TOKENS = chains.stream_types(...), and annotate with "
                "Annotated[AsyncIterator[bytes], TOKENS] so callers can read the stream with it too"
            )


def _list_item(node: ast.expr, resolver: _Resolver, what: str) -> ast.expr:
    """``T`` of a ``list[T]`` annotation (a batched body's inputs or outputs)."""
    node = _parse_string(node, resolver, what)
    if isinstance(node, ast.Subscript) and _evaluate(node.value, resolver) in (list, typing.List):  # noqa: UP006
        return node.slice
    raise ChainsUsageError(
        f"chainlet {resolver.chainlet}: {what} of the batched run_remote ({ast.unparse(node)}) must be "
        "written `list[...]` for its stub to be generated"
    )


def _batch_returns(node: ast.expr, resolver: _Resolver) -> ast.expr:
    """What one caller of a batched body gets: ``Out`` of ``list[Out]``, or the stream of
    ``Out`` of a body that yields ``list[Out]`` per step."""
    what = "the return annotation"
    node = _parse_string(node, resolver, what)
    if isinstance(node, ast.Subscript):
        origin = typing.get_origin(_evaluate(node, resolver))
        if origin in (collections.abc.AsyncIterator, collections.abc.AsyncGenerator):
            if isinstance(node.slice, ast.Tuple) and node.slice.elts:
                first = _without_exceptions(_list_item(node.slice.elts[0], resolver, what), resolver)
                node.slice.elts = [first, *node.slice.elts[1:]]
            else:
                node.slice = _without_exceptions(_list_item(node.slice, resolver, what), resolver)
            return node
    return _without_exceptions(_list_item(node, resolver, what), resolver)


def _without_exceptions(node: ast.expr, resolver: _Resolver) -> ast.expr:
    """``Out`` of ``Out | SomeError``: the errors a batched body returns are not sent."""
    node = _parse_string(node, resolver, "the return annotation")
    members: list[ast.expr] = []

    def flatten(part: ast.expr) -> None:
        if isinstance(part, ast.BinOp) and isinstance(part.op, ast.BitOr):
            flatten(part.left)
            flatten(part.right)
        elif (
            isinstance(part, ast.Subscript)
            and _evaluate(part.value, resolver) is typing.Union
            and isinstance(part.slice, ast.Tuple)
        ):
            for element in part.slice.elts:
                flatten(element)
        else:
            members.append(part)

    flatten(node)
    kept = [m for m in members if not _is_exception_class(_evaluate(m, resolver))]
    if not kept or len(kept) == len(members):
        return node
    result = kept[0]
    for member in kept[1:]:
        result = ast.BinOp(left=result, op=ast.BitOr(), right=member)
    return result


def _same_generic(a: Any, b: Any) -> bool:
    """``typing.AsyncIterator[str]`` and ``collections.abc.AsyncIterator[str]`` mean the same."""
    origin = typing.get_origin(a)
    return origin is not None and (origin, typing.get_args(a)) == (typing.get_origin(b), typing.get_args(b))


def _is_exception_class(value: Any) -> bool:
    return isinstance(value, type) and issubclass(value, BaseException)


def _evaluate(node: ast.expr, resolver: _Resolver) -> Any:
    """The object an annotation's subscripted name refers to in the user's module, if any."""
    try:
        return eval(compile(ast.Expression(node), "<annotation>", "eval"), dict(resolver.globals))
    except Exception:
        return None
