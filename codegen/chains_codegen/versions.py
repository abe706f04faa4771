"""A chainlet's ``code_version``: a digest of the code that runs in its process.

It covers every generated file of the chainlet except ``chainlet.json`` and the copied source,
with two things left out because they never change what the process does:

* the header comment of each generated file, which records where the code was generated
  from and to (generating into another directory gives the same version);
* the bodies of the methods of the *other* chainlets of the chain. Their classes are
  defined when the shared chain file is imported, but their methods run in their own
  processes only. Editing ``Greeter.run_remote`` thus changes Greeter's version and not
  its caller's, so ``push --watch`` replaces only Greeter. Signatures, decorators and
  class attributes still count; a caller that calls another chainlet's method directly
  (not through its stub) is the one case this misses.

The digest is the SHA-256 of a ``sha256sum``-style listing: one ``<digest>  <path>`` line
per file, sorted by path.
"""

from __future__ import annotations

import ast
import hashlib
import sys
from collections.abc import Mapping
from pathlib import Path

from chains.model import Chain, ChainletSpec

__all__ = ["code_version", "file_digest"]

Span = tuple[int, int]


def file_digest(data: bytes | Path) -> str:
    """The SHA-256 of ``data``, or of a file's content read in blocks (source may hold big files)."""
    if isinstance(data, bytes):
        return hashlib.sha256(data).hexdigest()
    digest = hashlib.sha256()
    with data.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def code_version(
    chain: Chain,
    spec: ChainletSpec,
    generated: Mapping[str, str],
    header: str,
    source: Mapping[str, Path],
    source_digests: Mapping[str, str],
) -> str:
    """The version of ``spec``: ``generated`` maps paths to texts, ``source`` the copied files."""
    entries = {rel: file_digest(text.removeprefix(header).encode()) for rel, text in generated.items()}
    foreign = _foreign_bodies(chain, spec, source)
    for rel, path in source.items():
        spans = foreign.get(rel)
        entries[f"src/{rel}"] = file_digest(_cut(path.read_bytes(), spans)) if spans else source_digests[rel]
    listing = "".join(f"{digest}  {rel}\n" for rel, digest in sorted(entries.items()))
    return file_digest(listing.encode())


def _foreign_bodies(chain: Chain, spec: ChainletSpec, source: Mapping[str, Path]) -> dict[str, list[Span]]:
    """Byte spans of the method bodies of chainlets other than ``spec``, per copied file."""
    by_file = {path.resolve(): rel for rel, path in source.items()}
    spans: dict[str, list[Span]] = {}
    for other in chain.chainlets:
        if other.cls in spec.cls.__mro__:  # its own class and the chainlet classes it inherits from
            continue
        file = getattr(sys.modules.get(other.cls.__module__), "__file__", None)
        rel = by_file.get(Path(file).resolve()) if file else None
        if rel is None or "." in other.cls.__qualname__:
            continue
        spans.setdefault(rel, []).extend(_method_bodies(source[rel].read_bytes(), other.cls.__qualname__))
    return spans


def _method_bodies(data: bytes, class_name: str) -> list[Span]:
    try:
        tree = ast.parse(data)
    except SyntaxError:
        return []
    starts = [0]
    for line in data.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))

    def offset(line: int, column: int) -> int:  # ast columns count UTF-8 bytes, as here
        return starts[line - 1] + column

    found = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.end_lineno is not None:
                    first = item.body[0]
                    end_column = item.end_col_offset or 0
                    found.append(
                        (offset(first.lineno, first.col_offset), offset(item.end_lineno, end_column))
                    )
    return found


def _cut(data: bytes, spans: list[Span]) -> bytes:
    kept, position = [], 0
    for start, end in sorted(spans):
        kept.append(data[position:start])
        position = max(position, end)
    kept.append(data[position:])
    return b"".join(kept)
