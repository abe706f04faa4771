"""The YAML of the files export targets write, by PyYAML: the same bytes every time.

Mappings keep the order they were built in (the order a reader of a manifest expects, ``kind``
before ``spec``), collections are always in block style, lists sit two spaces in under their
key as kubectl and most editors write them, and no line is folded. PyYAML decides the quoting;
characters outside ASCII are written as escapes, since with ``allow_unicode`` PyYAML writes a
NEL (U+0085) raw inside single quotes, where a reader takes it for a line break.

>>> print(dump({"kind": "Service", "spec": {"ports": [{"port": 8000, "name": "http"}]}, "x": "on"}), end="")
kind: Service
spec:
  ports:
    - port: 8000
      name: http
x: 'on'
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import Any

import yaml

__all__ = ["dump", "dump_all"]


class _Dumper(yaml.SafeDumper):
    # PyYAML writes a list's dashes level with its key by default.
    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)

    def represent_float(self, data: float) -> yaml.ScalarNode:
        # `.nan` and `.inf` are YAML, but not what a JSON-model reader of these files expects.
        if not math.isfinite(data):
            raise ValueError(f"cannot write {data!r} as YAML for a JSON-compatible reader")
        return super().represent_float(data)


_Dumper.add_representer(float, _Dumper.represent_float)
_Dumper.add_representer(tuple, _Dumper.represent_list)


def _comments(header: str | None) -> str:
    return "".join(f"# {line}".rstrip() + "\n" for line in header.splitlines()) if header else ""


def dump(data: Any, header: str | None = None) -> str:
    """``data`` as a YAML document ending in a newline; ``header`` becomes ``#`` comment lines on top."""
    return dump_all([data], header)


def dump_all(documents: Sequence[Any], header: str | None = None) -> str:
    """Several documents in one stream, separated by ``---``."""
    text: str = yaml.dump_all(
        documents,
        Dumper=_Dumper,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=False,
        width=sys.maxsize,
    )
    return _comments(header) + text
