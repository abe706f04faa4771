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

    rendered = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
    for header in rows[0]:
        rendered.add_column(header)
    for row in rows[1:]:
        cells = [escape(cell) for cell in row]
        if state_column is not None and row[state_column] in STATE_STYLES:
            cells[state_column] = f"[{STATE_STYLES[row[state_column]]}]{cells[state_column]}[/]"
        rendered.add_row(*cells)
    buffer = io.StringIO()
    width = shutil.get_terminal_size().columns
    Console(file=buffer, force_terminal=True, width=max(width, 60)).print(rendered)
    return buffer.getvalue().rstrip("\n")
