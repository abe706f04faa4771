"""Source locations for check messages: the file and line of a class, a method, a parameter."""

from __future__ import annotations

import ast
import inspect
import sys
import textwrap
from collections.abc import Callable
from typing import Any

from chains.errors import Violation

__all__ = ["Locator"]


class Locator:
    """Builds :class:`Violation` objects pointing into one class's source."""

    def __init__(self, cls: type, class_line: int | None = None) -> None:
        self.cls = cls
        module = sys.modules.get(cls.__module__)
        self.path = str(getattr(module, "__file__", None) or cls.__module__)
        self._class_line = class_line

    @property
    def class_line(self) -> int:
        if self._class_line is None:
            self._class_line = _class_line(self.cls)
        return self._class_line

    def at_class(self, message: str) -> Violation:
        return Violation(self.path, self.class_line, self.cls.__name__, message)

    def at_method(self, method: str, message: str) -> Violation:
        func = _function(self.cls.__dict__.get(method))
        line = (_param_line(func, "def") or func.__code__.co_firstlineno) if func is not None else None
        if line is None:
            return self.at_class(message)
        return Violation(self._path_of(func), line, f"{self.cls.__name__}.{method}", message)

    def at_param(self, method: str, param: str, message: str) -> Violation:
        func = _function(self.cls.__dict__.get(method))
        line = _param_line(func, param) if func is not None else None
        if line is None:
            return self.at_method(method, message)
        return Violation(self._path_of(func), line, f"{self.cls.__name__}.{method}", message)

    def annotation_text(self, method: str, param: str) -> str | None:
        """The annotation of ``param`` (or ``"return"``) as written in the source."""
        func = _function(self.cls.__dict__.get(method))
        node = _function_node(func) if func is not None else None
        if node is None:
            return None
        if param == "return":
            annotation = node.returns
        else:
            args = node.args
            found = [a for a in [*args.posonlyargs, *args.args, *args.kwonlyargs] if a.arg == param]
            annotation = found[0].annotation if found else None
        if annotation is None:
            return None
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
            return annotation.value  # a string annotation: its text is the annotation
        return ast.unparse(annotation)

    def _path_of(self, func: Callable[..., Any] | None) -> str:
        return func.__code__.co_filename if func is not None else self.path


def _class_line(cls: type) -> int:
    """The line of the ``class`` statement itself, below any decorators."""
    try:
        lines, start = inspect.getsourcelines(cls)
    except (OSError, TypeError):
        return 0
    try:
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except SyntaxError:
        return start
    node = next((n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)), None)
    return start + node.lineno - 1 if node is not None else start


def _function(obj: Any) -> Any:
    """The plain function behind a method, staticmethod or decorated (wrapped) function."""
    obj = inspect.unwrap(obj) if callable(obj) else getattr(obj, "__func__", None)
    return obj if inspect.isfunction(obj) else None


def _function_node(func: Any) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    except (OSError, TypeError, SyntaxError):
        return None
    return next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)), None)


def _param_line(func: Any, param: str) -> int | None:
    """The line where ``param`` is written; ``"return"`` and ``"def"`` name the annotation and the def."""
    node = _function_node(func)
    if node is None:
        return None
    offset: int = func.__code__.co_firstlineno - 1
    if param == "def":
        return node.lineno + offset
    if param == "return":
        return (node.returns.lineno if node.returns is not None else node.lineno) + offset
    args = node.args
    for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
        if arg is not None and arg.arg == param:
            return arg.lineno + offset
    return None
