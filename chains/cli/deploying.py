"""``chains push``: run a chain file on a target, and say what it replaced."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from chains import terminal
from chains.cli.group import fail, guarded, main
from chains.errors import ChainsError
from chains.loader import load_chain
from chains.model import Chain
from chains.targets import is_alive, target_names


def _pairs(option: str, metavar: str, pairs: tuple[str, ...]) -> dict[str, str]:
    values = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            fail(f"error: {option} takes {metavar}, got {pair!r}")
        values[key] = value
    return values


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--entrypoint", metavar="NAME", help="The entrypoint chainlet, if none is marked.")
@click.option("--name", metavar="NAME", help="The chain's name (default: from mark_entrypoint or the class).")
@click.option(
    "--target",
    type=click.Choice(target_names()),
    default="local",
    show_default=True,
    help="Where it runs: local processes, docker containers, or files for another system.",
)
@click.option("--port", type=int, help="The entrypoint's port on 127.0.0.1 (default: any free one).")
@click.option(
    "--secret",
    "secret_pairs",
    multiple=True,
    metavar="KEY[=VALUE]",
    help="A secret; repeatable. KEY alone asks for its value (or reads a line of stdin); a VALUE "
    "here is visible to every user in `ps`, so prefer --secrets-file or CHAINS_SECRET_KEY.",
)
@click.option("--secrets-file", type=click.Path(dir_okay=False), help="Secrets in dotenv format.")
@click.option("--dry-run", is_flag=True, help="Check and generate, start nothing.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Where --dry-run writes.")
@click.option("--base-image", envvar="CHAINS_BASE_IMAGE", help="docker: the base image of every chainlet.")
@click.option("--registry", metavar="PREFIX", help="kubernetes: where the images are pushed.")
@click.option("--address", metavar="ADDRESS", help="ray: the cluster (ray://HEAD:10001, HEAD:PORT, auto).")
@click.option("--apply", is_flag=True, help="kubernetes: apply the manifests with kubectl.")
@click.option(
    "--model-url",
    "model_url_pairs",
    multiple=True,
    metavar="NAME=URL",
    help="truss: the predict URL of chainlet NAME's model on Baseten; repeatable.",
)
@click.option("--watch", is_flag=True, help="Stay in the foreground and redeploy on source changes.")
@click.option(
    "--api-key",
    envvar="CHAINS_API_KEY",
    help="Require this API key from the entrypoint's callers; prefer CHAINS_API_KEY or --api-key-file "
    "(a key given here is visible to every user in `ps`).",
)
@click.option(
    "--api-key-file",
    type=click.Path(dir_okay=False, allow_dash=True),
    help="Read the API key from the first line of FILE (- for stdin).",
)
@click.option(
    "--cors-origin",
    "cors_origins",
    multiple=True,
    metavar="ORIGIN",
    help="Let web pages of ORIGIN (https://app.example, or * for any) call the entrypoint; repeatable.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
@click.option("--timeout", type=float, default=60.0, show_default=True, help="Seconds to wait for readiness.")
def push(
    file: str,
    entrypoint: str | None,
    name: str | None,
    target: str,
    port: int | None,
    secret_pairs: tuple[str, ...],
    secrets_file: str | None,
    dry_run: bool,
    out_dir: str | None,
    base_image: str | None,
    registry: str | None,
    address: str | None,
    apply: bool,
    model_url_pairs: tuple[str, ...],
    watch: bool,
    api_key: str | None,
    api_key_file: str | None,
    cors_origins: tuple[str, ...],
    as_json: bool,
    timeout: float,
) -> None:
    """Check, generate and start the chain in FILE; print its URL and a curl line.

    \b
    Examples:
      chains push chain.py
      chains push chain.py --watch --port 8000
      chains push chain.py --target docker --secret hf_token=...
    """
    from chains.deploy import collect_secrets, push_chain
    from chains.origins import check_origin
    from chains.targets import (
        PushOptions,
        TargetKind,
        export_target,
        ignored_settings,
        kind_of,
        options_for,
        refuse_foreign_options,
    )
    from chains.targets.state import chain_dir

    chain = guarded(lambda: load_chain(file, entrypoint, name))
    kind = guarded(lambda: kind_of(target))
    for note in guarded(lambda: ignored_settings(chain, target)):
        click.echo(f"note: {note}", err=True)
    api_key = _api_key(api_key, api_key_file, watch)
    given = _secrets(secret_pairs, watch)
    secrets = (
        guarded(lambda: collect_secrets(chain, given, secrets_file)) if kind is TargetKind.RUNNING else given
    )
    model_urls = _pairs("--model-url", "NAME=URL", model_url_pairs)
    guarded(lambda: refuse_foreign_options(target, address=address, model_urls=model_urls))

    # Built where used: a dry run of a running target takes none (--port on ray included).
    def make_options() -> PushOptions:
        return guarded(
            lambda: options_for(
                target,
                secrets=secrets,
                entry_port=port,
                timeout=timeout,
                base_image=base_image,
                registry=registry,
                out_dir=Path(out_dir) if out_dir else None,
                apply=apply,
                api_key=api_key,
                model_urls=model_urls,
                address=address,
                cors_origins=guarded(lambda: tuple(check_origin(origin) for origin in cors_origins)),
            )
        )

    if kind is TargetKind.EXPORT:
        if not (dry_run or apply) or out_dir is None:
            fail(f"error: target {target!r} writes files for another system: add --dry-run --out DIR")
        options = make_options()
        written = guarded(lambda: export_target(target).export(chain, Path(file), options))
        if as_json:
            click.echo(json.dumps({"name": chain.name, "target": target, "files": [str(p) for p in written]}))
        else:
            click.echo(f"wrote {len(written)} file(s) for target {target!r} into {out_dir}")
        return
    if dry_run:
        from chains_codegen import generate as run_generator

        out = Path(out_dir) if out_dir else chain_dir(chain.name) / "dry-run"
        result = guarded(lambda: run_generator(chain, Path(file), out))
        if as_json:
            dirs = {n: str(c.directory) for n, c in result.chainlets.items()}
            click.echo(json.dumps({"name": chain.name, "target": target, "generated": dirs}))
        else:
            click.echo(f"dry run: generated chain {chain.name!r} into {out} (nothing started)")
        return
    previous = _running_state(chain.name)
    options = make_options()
    handle = guarded(lambda: push_chain(chain, Path(file), target, options))
    replaced = _replacement(previous, handle.state) if previous is not None else None
    if as_json:
        payload = {
            "name": handle.name,
            "target": handle.target,
            "entrypoint_url": handle.entrypoint_url,
            "chainlets": handle.chainlets,
            "replaced": replaced,
        }
        click.echo(json.dumps(payload))
    else:
        if replaced is not None:
            click.echo(_describe_replacement(chain.name, replaced))
        click.echo(_push_table(chain, handle.state, with_key=bool(api_key)))
    if watch:
        from chains.watch import watch as run_watch

        guarded(lambda: run_watch(Path(file), chain, entrypoint=entrypoint))


def _argv_warning(option: str, instead: str, watch: bool) -> None:
    """Say that a credential given as an argument is readable by everyone on this machine: a
    process's command line is (``ps``, ``/proc/PID/cmdline``), for as long as it runs."""
    how_long = "for as long as --watch runs" if watch else "while the command runs"
    click.echo(
        f"warning: {option} on the command line can be read by every user of this machine (`ps`) "
        f"{how_long}; {instead}",
        err=True,
    )


def _api_key(given: str | None, file: str | None, watch: bool) -> str | None:
    """The entrypoint's API key: from --api-key-file, CHAINS_API_KEY, or (warned of) --api-key."""
    source = click.get_current_context().get_parameter_source("api_key")
    on_argv = given is not None and source is ParameterSource.COMMANDLINE
    if file is None:
        if on_argv:
            _argv_warning("--api-key", "set CHAINS_API_KEY or use --api-key-file FILE instead", watch)
        return given
    if on_argv:
        fail("error: give the API key with --api-key or --api-key-file, not both")
    try:
        with click.open_file(file) as stream:
            key: str = stream.readline().strip()
    except OSError as exc:
        fail(f"error: cannot read --api-key-file {file}: {exc.strerror}")
    if not key:
        fail(f"error: --api-key-file {file} is empty: put the API key on its first line")
    return key


def _secrets(pairs: tuple[str, ...], watch: bool) -> dict[str, str]:
    """The --secret options: KEY=VALUE (warned of), or KEY alone, whose value is asked for."""
    values = {}
    on_argv = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not key:
            fail(f"error: --secret takes KEY or KEY=VALUE, got {pair!r}")
        if sep:
            on_argv.append(key)
        else:
            value = click.prompt(
                f"value of secret {key}", hide_input=True, err=True, default="", show_default=False
            )
        values[key] = value
    if on_argv:
        names = ", ".join(on_argv)
        first = on_argv[0]
        instead = (
            f"give --secret {first} alone to be asked for it, a --secrets-file, or CHAINS_SECRET_{first}"
        )
        _argv_warning(f"the value of --secret {names}", instead, watch)
    return values


def _running_state(name: str) -> Any:
    """The state of chain ``name`` if it runs now (what a push of that name replaces)."""
    from chains.deploy import find_state

    try:
        state = find_state(name)
        return state if is_alive(state) else None
    except ChainsError:
        return None


def _replacement(previous: Any, current: Any) -> dict[str, Any]:
    """What a push replaced: the deployment, its source, and which chainlets changed."""
    before = {p.chainlet: p.code_version for p in previous.processes}
    after = {p.chainlet: p.code_version for p in current.processes}
    return {
        "deployment": previous.deployment,
        "source": previous.source,
        "same_source": Path(previous.source).resolve() == Path(current.source).resolve(),
        "changed": sorted(n for n in after if n in before and before[n] != after[n]),
        "added": sorted(n for n in after if n not in before),
        "removed": sorted(n for n in before if n not in after),
        "unchanged": sorted(n for n in after if before.get(n) == after[n]),
    }


def _describe_replacement(name: str, replaced: dict[str, Any]) -> str:
    if not replaced["same_source"]:
        head = f"replaced the running chain {name!r}, which was pushed from {replaced['source']}"
    else:
        head = f"replaced the running chain {name!r}"
    parts = [
        f"{what}: {', '.join(replaced[key])}"
        for key, what in (("changed", "code changed"), ("added", "new"), ("removed", "gone"))
        if replaced[key]
    ]
    if not parts:
        parts = ["no chainlet's code changed"]
    elif replaced["unchanged"]:
        parts.append(f"unchanged: {', '.join(replaced['unchanged'])}")
    return f"{head} ({'; '.join(parts)})"


def _push_table(chain: Chain, state: Any, with_key: bool = False) -> str:
    rows = [("CHAINLET", "URL", "PID", "STATE")]
    rows += [
        (
            p.chainlet + (f"[{p.replica}]" if len(state.replicas(p.chainlet)) > 1 else ""),
            p.url,
            str(p.pid or "-"),
            p.state,
        )
        for p in state.processes
    ]
    table = terminal.table(rows, terminal=terminal.is_terminal(), state_column=3)
    try_it = _try_line(chain, state.chain, state.entrypoint_url, with_key, state.entrypoint_ca)
    return (
        f"chain {state.chain!r} is running (target {state.target})\n{table}\n"
        f"entrypoint: {state.entrypoint_url}  (its API, with a form to try it: {state.entrypoint_url}/docs)\n"
        f"try: {try_it}\n"
        f"see it at work (graph, metrics, traces, logs) in a browser: chains ui {state.chain}\n"
        f"stop it with: chains stop {state.chain}"
    )


def _try_line(chain: Chain, name: str, url: str, with_key: bool, ca: str | None) -> str:
    """A first call that works: curl for HTTP endpoints; for a WebSocket one (which answers a
    POST with 426) ``chains call`` and a websocat line."""
    from chains.server.openapi import example_arguments

    bearer = '"Authorization: Bearer $CHAINS_API_KEY"'
    endpoint = chain.entrypoint.endpoint
    if endpoint.output_kind.is_socket:
        socket_url = "ws" + url.removeprefix("http")  # http -> ws, https -> wss
        return (
            f"chains call {name}   (each line of stdin a message, each answer a line)\n"
            f" or: websocat {socket_url}/run_remote" + (f" -H {bearer}" if with_key else "")
        )
    example = json.dumps(example_arguments(endpoint))
    return (
        f"curl -sN {url}/run_remote -H 'Content-Type: application/json' "
        + (f"--cacert {shlex.quote(ca)} " if ca else "")
        + (f"-H {bearer} " if with_key else "")
        + f"-d {shlex.quote(example)}"
    )
