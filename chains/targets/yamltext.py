"""A small YAML writer for the files export targets write: no dependency, and the same bytes every time.

It writes the JSON data model only (mappings with string keys, lists, strings, numbers, booleans
and null) in block style, keeping the order of each mapping as given. Strings are written bare
only when no YAML reader can take them for anything else; otherwise they are double-quoted, with
every character YAML does not allow raw escaped.

>>> print(dump({"kind": "Service", "spec": {"ports": [{"port": 8000, "name": "http"}]}, "x": "on"}), end="")
kind: Service
spec:
  ports:
    - port: 8000
      name: http
x: "on"
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["dump", "dump_all"]

# Bare strings: start with a letter, '/' or '_', then nothing YAML gives a meaning to.
_PLAIN_RE = re.compile(r"[A-Za-z_/][A-Za-z0-9_./-]*(?:[ ][A-Za-z0-9_./()-]+)*")
# Words YAML 1.1 readers (PyYAML among them) take for booleans or null.
_SPECIAL_WORDS = frozenset({"y", "yes", "n", "no", "on", "off", "true", "false", "null", "nan", "inf"})


def _escape(char: str) -> str:
    code = ord(char)
    if char in '"\\':
        return "\\" + char
    printable = 0x20 <= code <= 0x7E or 0xA0 <= code <= 0xD7FF or 0xE000 <= code <= 0xFFFD or code >= 0x10000
    if printable and code not in (0x2028, 0x2029):  # line and paragraph separators break lines
        return char
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _quoted(text: str) -> str:
    """A double-quoted scalar: characters YAML forbids raw (and quotes, backslashes) escaped."""
    return '"' + "".join(_escape(char) for char in text) + '"'


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"cannot write {value!r} as YAML for a JSON-compatible reader")
        text = repr(value)
        # YAML 1.1 readers need a '.' in a float with an exponent (1.0e-05, not 1e-05).
        return text if "." in text or "e" not in text else text.replace("e", ".0e", 1)
    if isinstance(value, str):
        # fullmatch: `$` would also match before a final newline, leaving "a\n" bare.
        if _PLAIN_RE.fullmatch(value) and value.lower() not in _SPECIAL_WORDS:
            return value
        return _quoted(value)
    raise TypeError(f"cannot write a {type(value).__name__} as YAML: {value!r}")


def _is_block(value: Any) -> bool:
    return isinstance(value, Mapping | list | tuple) and len(value) > 0


def _empty(value: Any) -> str:
    return "{}" if isinstance(value, Mapping) else "[]"


def _lines(value: Any, indent: int) -> Iterable[str]:
    pad = " " * indent
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"mapping keys must be strings, got {key!r}")
            head = f"{pad}{_scalar(key)}:"
            if _is_block(item):
                yield head
                # Lists sit two spaces in under their key, as kubectl and most editors write them.
                yield from _lines(item, indent + 2)
            elif isinstance(item, Mapping | list | tuple):
                yield f"{head} {_empty(item)}"
            else:
                yield f"{head} {_scalar(item)}"
    elif isinstance(value, Sequence) and not isinstance(value, str):
        for item in value:
            if _is_block(item):
                inner = list(_lines(item, indent + 2))
                first = inner[0][indent + 2 :]
                yield f"{pad}- {first}"
                yield from inner[1:]
            elif isinstance(item, Mapping | list | tuple):
                yield f"{pad}- {_empty(item)}"
            else:
                yield f"{pad}- {_scalar(item)}"
    else:
        yield f"{pad}{_scalar(value)}"


def dump(data: Any, header: str | None = None) -> str:
    """``data`` as a YAML document ending in a newline; ``header`` becomes ``#`` comment lines on top."""
    lines = [f"# {line}".rstrip() for line in header.splitlines()] if header else []
    if isinstance(data, Mapping | list | tuple) and not data:
        lines.append(_empty(data))
    else:
        lines.extend(_lines(data, 0))
    return "\n".join(lines) + "\n"


def dump_all(documents: Sequence[Any], header: str | None = None) -> str:
    """Several documents in one stream, separated by ``---``."""
    head = dump({}, header).removesuffix("{}\n") if header else ""
    return head + "---\n".join(dump(document) for document in documents)
