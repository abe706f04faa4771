"""Commands on a pushed chain: ``status``, ``restart``, ``logs``, ``call`` and ``stop``."""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from chains import terminal
from chains.cli.group import DEFAULT_CALL_TIMEOUT_SEC, fail, guarded, main
from chains.cli.trust import ca_file_option, entrypoint_context, trust_hint
from chains.errors import ChainsError, ChainsUsageError
from chains.targets import is_alive, replica_shown, wording

if TYPE_CHECKING:
    from chains.targets.state import ChainState


def _uptime(started_at: float) -> str:
    if not started_at:
        return "-"
    seconds = int(time.time() - started_at)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h"


@main.command()
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the state as JSON.")
def status(name: str | None, as_json: bool) -> None:
    """Show every chain, or one chain's chainlets with their state, restarts and uptime.

    \b
    Examples:
      chains status
      chains status my-chain --json
    """
    from chains.deploy import find_state
    from chains.targets.state import list_chains

    if name is None:
        names = list_chains()
        if not names:
            from chains.targets.state import chains_home

            click.echo(
                f"no chains are running in {chains_home()}; start one with `chains push FILE` "
                f"(chains keep their state in the folder they were pushed from: run this there, or "
                f"set CHAINS_HOME to that folder's .chains)"
            )
            return
        for chain_name in names:
            try:
                state = find_state(chain_name)
            except ChainsError as exc:
                click.echo(f"{chain_name}  unreadable  ({exc}); `chains stop {chain_name}` cleans up")
                continue
            alive = is_alive(state)
            # A stale chain's records still say "ready", but nothing supervises its processes
            # (they died with the supervisor): none of them counts as ready.
            ready = sum(p.state == "ready" for p in state.processes) if alive else 0
            health = _health(state) if alive else f"stale ({wording(state).gone})"
            click.echo(
                f"{state.chain}  {health}  {ready}/{len(state.processes)} ready  {state.entrypoint_url}"
            )
        return
    state = guarded(lambda: find_state(name))
    alive = is_alive(state)  # first: a target may refresh the processes as it looks
    if as_json:
        click.echo(state.model_dump_json(indent=2))
        return
    if not alive:
        click.echo(
            f"chain {name!r} is stale: {wording(state).gone_detail}; "
            f"run `chains stop {name}` to clean up, or push it again",
            err=True,
        )
    failed = _failed_chainlets(state)
    if failed and alive:
        click.echo(
            f"chain {name!r} is degraded: {', '.join(failed)} failed and "
            f"{'is' if len(failed) == 1 else 'are'} not running (a crash loop is started again "
            f"ever more slowly, up to every 5 minutes; see the reason below); bring "
            f"{'it' if len(failed) == 1 else 'them'} back with `chains restart {name}"
            f"{' ' + failed[0] if len(failed) == 1 else ''}`",
            err=True,
        )
    rows: list[tuple[str, ...]] = [("CHAINLET", "URL", "PID", "STATE", "RESTARTS", "UPTIME")]
    for p in state.processes:
        running, shown = replica_shown(state, p)
        rows.append(
            (
                p.chainlet + (f"[{p.replica}]" if len(state.replicas(p.chainlet)) > 1 else ""),
                p.url,
                str(p.pid or "-"),
                shown,
                str(p.restarts),
                _uptime(p.started_at) if running else "-",
            )
        )
    if any(p.node for p in state.processes):  # targets of many machines: where each replica runs
        rows = [
            (*r, n) for r, n in zip(rows, ["NODE", *(p.node or "-" for p in state.processes)], strict=True)
        ]
    try:  # the ray target's replicas answer at its proxy, whose authority the entrypoint's is
        verify: ssl.SSLContext | bool = state.entrypoint_context() or True
    except ChainsUsageError:
        verify = True  # the authority's file is gone: `call` says so; here batching shows "-"
    batching = [_batching(p.url, verify) if p.state == "ready" else None for p in state.processes]
    if any(b is not None for b in batching):
        rows = [(*r, b or "-") for r, b in zip(rows, ["BATCHING", *batching], strict=True)]
    click.echo(f"chain {state.chain!r} (target {state.target}, entrypoint {state.entrypoint_url})")
    click.echo(terminal.table(rows, terminal=terminal.is_terminal(), state_column=3))
    for p in state.processes:
        if p.reason:
            label = p.chainlet + (f"[{p.replica}]" if len(state.replicas(p.chainlet)) > 1 else "")
            click.echo(f"{label} last went down: {p.reason}")
        if p.log_lines_lost:
            click.echo(f"{p.chainlet}: {p.log_lines_lost} log lines could not be written (is the disk full?)")


def _batching(url: str, verify: ssl.SSLContext | bool) -> str | None:
    """The queue and mean batch size of a batched chainlet, read from its /metrics."""
    import httpx

    from chains.metrics import batching_summary
    from chains.wire import METRICS

    try:
        response = httpx.get(url.rstrip("/") + METRICS, timeout=0.5, verify=verify)
    except httpx.HTTPError:
        return None
    return batching_summary(response.text) if response.status_code == 200 else None


def _failed_chainlets(state: Any) -> list[str]:
    """The chainlets of ``state`` with a replica that failed for good."""
    return sorted({p.chainlet for p in state.processes if p.state == "failed"})


def _health(state: Any) -> str:
    failed = _failed_chainlets(state)
    return f"degraded ({', '.join(failed)} failed)" if failed else "running"


@main.command()
@click.argument("name")
@click.argument("chainlet", required=False)
@click.option("--timeout", type=float, default=60.0, show_default=True, help="Seconds to wait for readiness.")
def restart(name: str, chainlet: str | None, timeout: float) -> None:
    """Restart chain NAME's CHAINLET (or every chainlet) without a re-push.

    A chainlet that failed for good starts afresh; one that runs gets new processes, swapped
    in once they are ready, so calls keep being answered.

    \b
    Examples:
      chains restart mychain Formatter
      chains restart mychain
    """
    from chains.deploy import find_state, restart_chain

    state = guarded(lambda: find_state(name))
    if chainlet is not None and chainlet not in state.chainlet_names():
        fail(
            f"error: chain {name!r} has no chainlet {chainlet!r}; it has: {', '.join(state.chainlet_names())}"
        )
    restarted = guarded(lambda: restart_chain(state, chainlet, timeout))
    click.echo(f"restarted {', '.join(restarted)} of chain {name!r}; all ready")


@main.command()
@click.argument("name")
@click.argument("chainlet", required=False)
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines.")
@click.option("-n", "--lines", type=int, default=100, show_default=True, help="Lines to show per log.")
def logs(name: str, chainlet: str | None, follow: bool, lines: int) -> None:
    """Print the logs of a chain's chainlets (all, or one); a stopped chain's too.

    \b
    Examples:
      chains logs my-chain
      chains logs my-chain Entry -f
    """
    from chains.deploy import find_state
    from chains.targets import running_target

    try:
        state = find_state(name)
    except ChainsUsageError:
        _stopped_logs(name, chainlet, lines)
        return
    except ChainsError as exc:
        fail(f"error: {exc}")
    if chainlet is not None and chainlet not in state.chainlet_names():
        fail(
            f"error: chain {name!r} has no chainlet {chainlet!r}; it has: {', '.join(state.chainlet_names())}"
        )
    printed = False
    try:
        for line in running_target(state.target).logs(state, chainlet, follow, lines):
            printed = True
            click.echo(line)
    except KeyboardInterrupt:
        return
    except ChainsError as exc:  # e.g. the docker target's engine does not answer
        fail(f"error: {exc}")
    if not printed:
        click.echo(f"(no log lines yet for chain {name!r})", err=True)


def _stopped_logs(name: str, chainlet: str | None, lines: int) -> None:
    """The logs a stopped chain left behind, said to be a stopped chain's."""
    from chains.targets.logs import follow_files
    from chains.targets.state import chain_dir, iter_logs

    paths = guarded(lambda: list(iter_logs(name)))
    if chainlet is not None:
        paths = [p for p in paths if p.stem == chainlet or p.stem.startswith(f"{chainlet}-")]
    if not paths:
        fail(f"error: no chain named {name!r} is running, and none left logs in {chain_dir(name).parent}")
    click.echo(f"chain {name!r} is not running; its last logs ({paths[0].parent}):", err=True)
    for line in follow_files(paths, lines, follow=False):
        click.echo(line)


@main.command()
@click.argument("name")
@click.option("--json", "json_args", metavar="ARGS", help="The arguments as a JSON object.")
@click.option(
    "--file", "args_file", type=click.Path(dir_okay=False), help="A file holding the JSON arguments."
)
@click.option("--api-key", envvar="CHAINS_API_KEY", help="The entrypoint's API key, if it has one.")
@click.option(
    "--route",
    metavar="'METHOD /PATH'",
    help="Call one of the entrypoint's @chains.route endpoints; --json is then its whole body.",
)
@click.option(
    "--header", "headers", multiple=True, metavar="'NAME: VALUE'", help="--route: a request header."
)
@click.option(
    "--timeout",
    type=float,
    default=DEFAULT_CALL_TIMEOUT_SEC,
    show_default=True,
    help="Give up when the chain is silent this many seconds (a stream: between items).",
)
@ca_file_option
@click.option(
    "--async",
    "as_job",
    is_flag=True,
    help="Submit the call as an async job and print its request id (see `chains jobs`).",
)
@click.option("--webhook", help="With --async: the URL the result is POSTed to, signed.")
@click.option(
    "--priority",
    type=int,
    default=0,
    show_default=True,
    help="With --async: 0 runs first, 2 last.",
)
@click.option(
    "--max-queue-sec",
    type=int,
    default=600,
    show_default=True,
    help="With --async: a job still queued after this long expires unrun.",
)
@click.option(
    "--attempts",
    type=int,
    default=1,
    show_default=True,
    help="With --async: how often a failing job runs in all (at least once: see docs/jobs.md).",
)
def call(
    name: str,
    json_args: str | None,
    args_file: str | None,
    api_key: str | None,
    route: str | None,
    headers: tuple[str, ...],
    timeout: float,
    ca_file: Path | None,
    as_job: bool,
    webhook: str | None,
    priority: int,
    max_queue_sec: int,
    attempts: int,
) -> None:
    """Call chain NAME's entrypoint and print the answer; streams print as they arrive.

    A WebSocket entrypoint gets each line of stdin as a message; its replies print as they
    arrive. An https:// entrypoint whose certificate a private authority issued is verified
    with that authority: the one recorded when the chain was pushed, or --ca-file. With
    --route, one of its @chains.route endpoints is called instead of run_remote, with --json
    as the request's whole body (none for a GET), and --header for its headers.

    \b
    Examples:
      chains call my-chain --json '{"text": "hello"}'
      chains call my-chain --file args.json --timeout 600
      chains call my-chain --json '{"text": "hello"}' --ca-file proxy-ca.pem
      chains call my-chain --async --json '{"text": "hello"}'
      chains call my-chain --async --priority 0 --attempts 3 --webhook https://example.com/hook --json '{}'
      chains call my-chain --route 'POST /v1/chat/completions' --json '{"model": "m", "messages": []}'
      chains call my-chain --route 'GET /v1/models'
    """
    from chains.cli.calling import (
        CallFailed,
        UntrustedCertificate,
        call_entrypoint,
        call_route,
        converse_with_entrypoint,
    )
    from chains.deploy import find_state
    from chains.streaming import kind_named

    state = guarded(lambda: find_state(name))
    if json_args is not None and args_file is not None:
        fail("error: give the arguments with --json or --file, not both")
    text = Path(args_file).read_text() if args_file else (json_args or "{}")
    try:
        arguments = json.loads(text)
    except ValueError as exc:
        fail(f"error: the arguments are not valid JSON: {exc}")
    if route is None and not isinstance(arguments, dict):
        fail('error: the arguments must be a JSON object, e.g. --json \'{"prompt": "hi"}\'')
    route_call = _route_call(route, headers, given=json_args is not None or args_file is not None)
    if not is_alive(state):
        fail(f"error: chain {name!r} is stale ({wording(state).gone}); push it again")
    if as_job:
        from chains.cli.jobs import submit_job
        from chains.client_jobs import JobOptions

        try:
            options = JobOptions(
                webhook_endpoint=webhook,
                priority=priority,
                max_time_in_queue_seconds=max_queue_sec,
                max_attempts=attempts,
            )
        except ValueError as exc:
            fail(f"error: {exc}")
        click.echo(submit_job(state, arguments, api_key=api_key, options=options, ca_file=ca_file))
        return
    kind = guarded(lambda: kind_named(state.entrypoint_kind))
    context = guarded(lambda: entrypoint_context(state, ca_file))
    try:
        if route_call is not None:
            method, path, sent = route_call
            body = arguments if json_args is not None or args_file is not None else None
            coroutine = call_route(
                state.entrypoint_url,
                method,
                path,
                body,
                sent,
                api_key=api_key,
                timeout=timeout,
                ssl_context=context,
            )
            asyncio.run(coroutine)
            return
        if kind.is_socket:  # a conversation: stdin's lines go out, the replies print as they come
            asyncio.run(converse_with_entrypoint(state.entrypoint_url, api_key=api_key, ssl_context=context))
            return
        asyncio.run(
            call_entrypoint(
                state.entrypoint_url,
                arguments,
                kind,
                api_key=api_key,
                timeout=timeout,
                ssl_context=context,
                debug=_owner_proof(state),
            )
        )
    except UntrustedCertificate as exc:
        fail(f"error: {exc}; {trust_hint(state, ca_file)}")
    except CallFailed as exc:
        from chains.source_map import to_user_files

        failed = _failed_chainlets(guarded(lambda: find_state(name)))
        hint = f"\n{', '.join(failed)} failed for good: `chains restart {name}`" if failed else ""
        text = to_user_files(str(exc), Path(state.source).parent) if state.source else str(exc)
        fail(f"error: {text}{hint}")


_ROUTE_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def _route_call(
    route: str | None, headers: tuple[str, ...], *, given: bool
) -> tuple[str, str, dict[str, str]] | None:
    """``--route 'POST /v1/x'`` and ``--header``s as (method, path, headers); fails on a typo."""
    if route is None:
        if headers:
            fail("error: --header goes with --route; run_remote calls take no headers of yours")
        return None
    method, _, path = route.strip().partition(" ")
    method, path = method.upper(), path.strip()
    if method not in _ROUTE_METHODS or not path.startswith("/"):
        fail(
            f"error: --route takes 'METHOD /PATH' (METHOD one of {', '.join(_ROUTE_METHODS)}), got {route!r}"
        )
    if method == "GET" and given:
        fail("error: a GET has no body: drop --json/--file, or put parameters in the query ('/path?x=1')")
    sent: dict[str, str] = {}
    for header in headers:
        name, colon, value = header.partition(":")
        if not colon or not name.strip():
            fail(f"error: --header takes 'NAME: VALUE', got {header!r}")
        sent[name.strip().lower()] = value.strip()
    return method, path, sent


def _owner_proof(state: ChainState) -> str | None:
    """Proof that this is the chain's owner, which gets every hop's traceback with an error
    (see chains.wire.debug_proof): from the chain's token, in its owner-only deployment file.
    None where this machine does not hold that file."""
    from chains.targets.state import Deployment, chain_dir
    from chains.wire import debug_proof

    path = chain_dir(state.chain) / "deployments" / state.deployment / "deployment.json"
    try:
        deployment = Deployment.model_validate_json(path.read_bytes())
    except (OSError, ValueError):
        return None
    token = next((c.env.get("CHAINS_INTERNAL_TOKEN") for c in deployment.chainlets if c.is_entrypoint), None)
    return debug_proof(token) if token else None


@main.command()
@click.argument("name")
@click.option(
    "--grace",
    type=float,
    default=None,
    help="Seconds to drain before killing (default: the chainlets' own drain period and 5 s).",
)
def stop(name: str, grace: float | None) -> None:
    """Stop chain NAME: drain its chainlets, then stop them; nothing is left running.

    \b
    Examples:
      chains stop my-chain
      chains stop my-chain --grace 60
    """
    from chains.deploy import stop_chain

    stopped = guarded(lambda: stop_chain(name, grace))
    if not stopped:
        click.echo(f"nothing of chain {name!r} was running; removed its leftover state")
        return
    words = wording(stopped[0])
    count = sum(len(s.chainlet_names()) if words.per_chainlet else len(s.processes) for s in stopped)
    extra = f" in {len(stopped)} deployments" if len(stopped) > 1 else ""
    click.echo(f"stopped chain {name!r} ({count} {words.units}{extra})")
