"""Python source text as ``ruff format`` writes it, for the few shapes the generator emits.

The generated files must pass ``ruff format --check`` without running ruff (it is not a
library), so expressions and the lines that hold them are printed here the way ruff
prints them: double quotes, spaces around ``=`` only when annotated, and long brackets
split first onto one indented line, then one element per line with a trailing comma.

>>> import ast
>>> expression(ast.parse("Literal['a', 'b']", mode="eval").body)
'Literal["a", "b"]'
>>> bracketed("    def f(", ["self", "x: int"], ") -> int:", indent="    ")
['    def f(self, x: int) -> int:']
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

__all__ = ["LINE_LENGTH", "bracketed", "bytes_literal", "expression", "string_literal"]

LINE_LENGTH = 110
INDENT = "    "

# Binding strength of binary operators, weakest first, as in the Python grammar.
_PRECEDENCE: dict[type[ast.operator], int] = {
    ast.BitOr: 1,
    ast.BitXor: 2,
    ast.BitAnd: 3,
    ast.LShift: 4,
    ast.RShift: 4,
    ast.Add: 5,
    ast.Sub: 5,
    ast.Mult: 6,
    ast.MatMult: 6,
    ast.Div: 6,
    ast.FloorDiv: 6,
    ast.Mod: 6,
    ast.Pow: 8,
}
_UNARY_PRECEDENCE = 7
_ATOM = 9
_SYMBOLS: dict[type[ast.AST], str] = {
    ast.BitOr: "|",
    ast.BitXor: "^",
    ast.BitAnd: "&",
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.MatMult: "@",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
    ast.USub: "-",
    ast.UAdd: "+",
    ast.Invert: "~",
}


def string_literal(value: str) -> str:
    """A ``str`` literal with ruff's quotes: double, unless that needs more escapes.

    >>> string_literal("it's"), string_literal('say "hi"')
    ('"it\\'s"', '\\'say "hi"\\'')
    """
    quote = "'" if value.count('"') > value.count("'") else '"'
    out = []
    for char in value:
        if char == "\\":
            out.append("\\\\")
        elif char == quote:
            out.append("\\" + char)
        elif char.isprintable():
            out.append(char)
        else:
            out.append(repr(char)[1:-1])  # \n, \t, \x00, \u200b: Python's own escapes
    return quote + "".join(out) + quote


def bytes_literal(value: bytes) -> str:
    """A ``bytes`` literal with ruff's quotes.

    >>> bytes_literal(b"a\\x00")
    'b"a\\\\x00"'
    """
    quote = "'" if value.count(b'"') > value.count(b"'") else '"'
    out = []
    for byte in value:
        char = chr(byte)
        if char == "\\":
            out.append("\\\\")
        elif char == quote:
            out.append("\\" + char)
        elif 0x20 <= byte < 0x7F:
            out.append(char)
        else:
            out.append(repr(bytes([byte]))[2:-1])
    return "b" + quote + "".join(out) + quote


def expression(node: ast.expr) -> str:
    """The source of ``node`` on one line, formatted as ruff formats it.

    Shapes outside what annotations and defaults usually hold fall back to
    :func:`ast.unparse`: still valid Python, though ruff may then want to reformat it.
    """
    return _Printer().expr(node)


class _Printer:
    def expr(self, node: ast.expr, context: int = 0) -> str:
        text, strength = self._expr(node)
        return f"({text})" if strength < context else text

    def _expr(self, node: ast.expr) -> tuple[str, int]:
        if isinstance(node, ast.Constant):
            return _constant(node.value), _ATOM
        if isinstance(node, ast.Name):
            return node.id, _ATOM
        if isinstance(node, ast.Attribute):
            return f"{self.expr(node.value, _ATOM)}.{node.attr}", _ATOM
        if isinstance(node, ast.Subscript):
            return f"{self.expr(node.value, _ATOM)}[{self._slice(node.slice)}]", _ATOM
        if isinstance(node, ast.Tuple):
            return f"({self._tuple_items(node.elts)})", _ATOM
        if isinstance(node, ast.List):
            return f"[{self._items(node.elts)}]", _ATOM
        if isinstance(node, ast.Set) and node.elts:
            return f"{{{self._items(node.elts)}}}", _ATOM
        if isinstance(node, ast.Dict) and all(key is not None for key in node.keys):
            pairs = ", ".join(
                f"{self.expr(key)}: {self.expr(value)}"
                for key, value in zip(node.keys, node.values, strict=True)
                if key is not None
            )
            return f"{{{pairs}}}", _ATOM
        if isinstance(node, ast.Call) and not any(isinstance(a, ast.Starred) for a in node.args):
            args = [self.expr(a) for a in node.args]
            args += [f"{k.arg}={self.expr(k.value)}" for k in node.keywords if k.arg is not None]
            if len(args) == len(node.args) + len(node.keywords):
                return f"{self.expr(node.func, _ATOM)}({', '.join(args)})", _ATOM
        if isinstance(node, ast.UnaryOp) and type(node.op) in _SYMBOLS:
            operand = self.expr(node.operand, _UNARY_PRECEDENCE)
            return f"{_SYMBOLS[type(node.op)]}{operand}", _UNARY_PRECEDENCE
        if isinstance(node, ast.BinOp) and type(node.op) in _PRECEDENCE:
            strength = _PRECEDENCE[type(node.op)]
            # Left-associative except `**`: the side that would regroup needs parentheses.
            left_need, right_need = (strength + 1, strength) if strength == 8 else (strength, strength + 1)
            left = self.expr(node.left, left_need)
            right = self.expr(node.right, right_need)
            return f"{left} {_SYMBOLS[type(node.op)]} {right}", strength
        return ast.unparse(node), 0

    def _slice(self, node: ast.expr) -> str:
        if isinstance(node, ast.Tuple) and node.elts:
            return self._tuple_items(node.elts)
        return self.expr(node)

    def _items(self, nodes: Sequence[ast.expr]) -> str:
        return ", ".join(self.expr(n) for n in nodes)

    def _tuple_items(self, nodes: Sequence[ast.expr]) -> str:
        return self._items(nodes) + ("," if len(nodes) == 1 else "")


def _constant(value: object) -> str:
    if isinstance(value, str):
        return string_literal(value)
    if isinstance(value, bytes):
        return bytes_literal(value)
    if value is Ellipsis:
        return "..."
    return repr(value)


def bracketed(head: str, items: Sequence[str], tail: str, *, indent: str) -> list[str]:
    """``head + items + tail`` as ruff splits it: one line if it fits, else the items on
    one indented line if that fits, else one item per line with a trailing comma.

    ``head`` ends with the opening bracket and ``tail`` starts with the closing one;
    ``indent`` is the indentation of ``head``'s line.

    >>> bracketed("x = f(", ["a" * 60, "b" * 60], ")", indent="")[1]
    '    aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa,'
    """
    joined = ", ".join(items)
    one_line = f"{head}{joined}{tail}"
    if len(one_line) <= LINE_LENGTH:
        return [one_line]
    inner = indent + INDENT
    closing = indent + tail
    if items and len(inner + joined) <= LINE_LENGTH:
        return [head, inner + joined, closing]
    return [head, *(f"{inner}{item}," for item in items), closing]
