"""Tables for a person at a terminal (rich, in colour) and for everything else (plain)."""

from __future__ import annotations

import re

from chains.terminal import table

ROWS = [
    ("CHAINLET", "URL", "PID", "STATE"),
    ("Entry", "http://127.0.0.1:1", "12", "ready"),
    ("Leaf", "-", "-", "failed"),
]
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_plain_output_is_aligned_text_without_escapes() -> None:
    text = table(ROWS, terminal=False, state_column=3)
    assert "\x1b" not in text
    assert text.splitlines()[2] == "  Leaf      -                   -    failed"


def test_a_terminal_gets_a_rich_table_with_the_state_coloured() -> None:
    text = table(ROWS, terminal=True, state_column=3)
    assert "\x1b[" in text
    assert "\x1b[1;31mfailed" in text  # bold red: a failed chainlet stands out
    assert "\x1b[32mready" in text
    plain = ANSI.sub("", text)
    for row in ROWS:
        assert all(cell in plain for cell in row)
