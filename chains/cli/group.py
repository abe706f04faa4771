"""The ``chains`` command group, and how its commands report a failure."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import NoReturn, TypeVar

import click

from chains.errors import ChainsError, ChainsUsageError

__all__ = ["DEFAULT_CALL_TIMEOUT_SEC", "fail", "guarded", "main", "report"]

T = TypeVar("T")

# Long enough for a model's answer, short enough that a chain that cannot answer is said.
DEFAULT_CALL_TIMEOUT_SEC = 120.0


class _Commands(click.Group):
    """Lists every command with its whole first sentence: click would cut it at the width of
    the terminal, mid-phrase."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=200)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="chains-sdk")
def main() -> None:
    """Build, check and run chains of typed, streaming Python services.

    \b
    Examples:
      chains init my-chain && cd my-chain
      chains check chain.py
      chains push chain.py
      chains call my-chain --json '{"text": "hello"}'
    """


def fail(message: str, code: int = 1) -> NoReturn:
    # click drops the colour where standard error is not a terminal.
    if message.startswith("error:"):
        message = click.style("error:", fg="red", bold=True) + message[len("error:") :]
    click.echo(message, err=True)
    sys.exit(code)


def guarded(action: Callable[[], T]) -> T:
    """Run ``action``; a chains error becomes a readable message and exit code 1."""
    try:
        return action()
    except ChainsUsageError as exc:
        report(exc)
        sys.exit(1)
    except ChainsError as exc:
        fail(f"error: {exc}")


def report(exc: ChainsUsageError) -> None:
    if exc.violations:
        count = len(exc.violations)
        lines = [f"{count} problem{'s' if count != 1 else ''} found:"]
        lines += [f"  {violation}" for violation in exc.violations]
        lines += [f"also: {note}" for note in getattr(exc, "__notes__", ())]
    else:
        lines = [f"error: {exc}"]
    # Whatever the chain file printed while it was imported comes first, not amid the report.
    sys.stdout.flush()
    click.echo("\n".join(lines), err=True)
