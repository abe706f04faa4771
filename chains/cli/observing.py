"""Looking at a chain at work: ``trace`` and ``ui``."""

from __future__ import annotations

import json
import sys

import click

from chains.cli.group import fail, guarded, main


@main.command()
@click.argument("name")
@click.argument("request_id", required=False)
@click.option("-n", "--limit", type=int, default=20, show_default=True, help="Requests to list.")
@click.option("--json", "as_json", is_flag=True, help="Print the spans (or the list) as JSON.")
def trace(name: str, request_id: str | None, limit: int, as_json: bool) -> None:
    """Show chain NAME's recent requests, or REQUEST_ID's spans as a waterfall across hops.

    \b
    REQUEST_ID is the x-chains-request-id of a call (a unique prefix will do), or its trace id.
    Traces are kept locally by `chains push` (the local target), the last 1000 of them.

    \b
    Examples:
      chains trace my-chain
      chains trace my-chain 3f2a9c --json
    """
    from rich.console import Console

    from chains.targets.state import chain_dir, list_chains
    from chains.tracing import store
    from chains.tracing.waterfall import print_recent, print_waterfall

    folder = guarded(lambda: chain_dir(name))
    if not folder.is_dir():
        known = ", ".join(list_chains()) or "none"
        fail(f"error: no chain named {name!r} (chains here: {known}); start it with `chains push FILE`")
    path = store.store_path(folder)
    console = Console(highlight=False)
    if request_id is None:
        # Batches are traces of their own; the list is of requests (JSON keeps them all).
        traces = store.recent_traces(path, limit, batches=as_json)
        if as_json:
            click.echo(json.dumps([t.to_json() for t in traces], indent=2))
        elif not traces:
            click.echo(f"no traces of chain {name!r} yet: call it, then look again", err=True)
        else:
            print_recent(console, name, traces)
        return
    spans = store.trace_spans(path, request_id)
    if not spans:
        fail(
            f"error: no trace of request {request_id!r} in chain {name!r} "
            f"(`chains trace {name}` lists the recent ones)"
        )
    if as_json:
        click.echo(json.dumps([s.to_json() for s in spans], indent=2))
    else:
        print_waterfall(console, spans)


@main.command()
@click.argument("name")
@click.option("--port", type=int, default=0, help="The port on the loopback (default: any free one).")
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="A loopback address to listen on; any other is refused (the page is for this machine only).",
)
@click.option(
    "--api-key",
    envvar="CHAINS_API_KEY",
    help="The entrypoint's API key, for a chain on docker or swarm (local and ray chains record theirs).",
)
def ui(name: str, port: int, host: str, api_key: str | None) -> None:
    """Serve a web page of running chain NAME on this machine: its graph, states, live
    metrics, traces, logs and a form to call it.

    \b
    The page answers requests from this machine only; when the chain has an API key, the URL
    printed holds it, and the page asks for it.

    \b
    Examples:
      chains ui my-chain
      chains ui my-chain --port 8765
      chains ui my-docker-chain --api-key "$KEY"
    """
    from chains.ui.serve import serve_dashboard

    def announce(url: str) -> None:
        click.echo(f"dashboard of chain {name!r}: {url}  (Ctrl-C to stop)")
        sys.stdout.flush()

    try:
        guarded(lambda: serve_dashboard(name, host, port, announce, api_key))
    except KeyboardInterrupt:
        return
