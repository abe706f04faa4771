"""What the command line prints for a person at a terminal: rich tables in colour there,
plain aligned text otherwise (pipes, files, tests), so scripts read the same output.

Only the CLI imports this module; ``import chains`` does not load rich.
"""

from __future__ import annotations

import io
import shutil
import sys
from collections.abc import Sequence

__all__ = ["STATE_STYLES", "is_terminal", "table"]

# The colour of a chainlet's state: what needs a look stands out.
STATE_STYLES = {
    "ready": "green",
    "starting": "yellow",
    "restarting": "yellow",
    "failed": "bold red",
    "gone": "bold red",
    "stopped": "dim",
}


def is_terminal() -> bool:
    """Whether standard output is a terminal (where colour and rich tables are wanted)."""
    return sys.stdout.isatty()


def table(rows: Sequence[Sequence[str]], *, terminal: bool, state_column: int | None = None) -> str:
    """``rows`` (the first one is the header) as a table: plain, indented two spaces, columns
    aligned; or, for a ``terminal``, a rich table with the state column coloured.

    >>> print(table([("NAME", "STATE"), ("Entry", "ready")], terminal=False))
      NAME   STATE
      Entry  ready
    """
    if not terminal:
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        return "\n".join(
            "  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            for row in rows
        )
    from rich import box
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    width = max(shutil.get_terminal_size().columns, 60)
    rendered = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
    keep = _unbroken_columns(rows, width)
    for index, header in enumerate(rows[0]):
        # In a narrow terminal a long cell wraps, folding a word only when it must: nothing is
        # cut to an ellipsis, no header narrowed below its own width, and a short one-word
        # cell (a URL, a PID) stays on one line, whole, to be read or copied.
        rendered.add_column(header, overflow="fold", min_width=len(header), no_wrap=index in keep)
    for row in rows[1:]:
        cells = [escape(cell) for cell in row]
        if state_column is not None and row[state_column] in STATE_STYLES:
            cells[state_column] = f"[{STATE_STYLES[row[state_column]]}]{cells[state_column]}[/]"
        rendered.add_row(*cells)
    buffer = io.StringIO()
    Console(file=buffer, force_terminal=True, width=width).print(rendered)
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines())


# A one-word cell up to this long is kept on one line; the other columns share what is left.
_UNBROKEN = 24
_LEFT_FOR_THE_REST = 12


def _unbroken_columns(rows: Sequence[Sequence[str]], width: int) -> set[int]:
    """The columns whose cells are all single words of up to :data:`_UNBROKEN` characters,
    the shortest first, as long as the others keep room to wrap in."""
    widths = {i: max(len(row[i]) for row in rows) for i in range(len(rows[0]))}
    candidates = [i for i, w in widths.items() if w <= _UNBROKEN and all(" " not in row[i] for row in rows)]
    keep: set[int] = set()
    used = 3 * (len(widths) - 1)  # the gaps between columns
    for i in sorted(candidates, key=lambda i: widths[i]):
        if used + widths[i] > width - _LEFT_FOR_THE_REST * (len(widths) > len(candidates)):
            break
        keep.add(i)
        used += widths[i]
    return keep
