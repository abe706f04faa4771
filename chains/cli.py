"""The ``chains`` command line."""

from __future__ import annotations

import sys

import click

from chains.checks import Chain
from chains.errors import ChainsUsageError
from chains.loader import load_chain

__all__ = ["main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="chains")
def main() -> None:
    """Build, check and run chains of typed, streaming Python services."""


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--entrypoint", metavar="NAME", help="The entrypoint chainlet, if none is marked.")
def check(file: str, entrypoint: str | None) -> None:
    """Check the chain in FILE and list every problem found, or summarise it."""
    try:
        chain = load_chain(file, entrypoint)
    except ChainsUsageError as exc:
        _report(exc)
        sys.exit(1)
    click.echo(summary(chain, file))


def summary(chain: Chain, file: str) -> str:
    """What ``chains check`` prints for a clean chain: one line per chainlet."""
    count = len(chain.chainlets)
    lines = [
        f"ok: chain {chain.name!r} in {file}: {count} chainlet{'s' if count != 1 else ''}, "
        f"entrypoint {chain.entrypoint.name}"
    ]
    width = max(len(spec.name) for spec in chain.chainlets)
    for spec in reversed(chain.chainlets):  # the entrypoint first, then what it calls
        deps = ", ".join(dep.name for dep in spec.dependencies)
        calls = f"  (calls {deps})" if deps else ""
        lines.append(f"  {spec.name:<{width}}  {spec.endpoint.describe()}{calls}")
    return "\n".join(lines)


def _report(exc: ChainsUsageError) -> None:
    if exc.violations:
        count = len(exc.violations)
        click.echo(f"{count} problem{'s' if count != 1 else ''} found:", err=True)
        for violation in exc.violations:
            click.echo(f"  {violation}", err=True)
    else:
        click.echo(f"error: {exc}", err=True)
