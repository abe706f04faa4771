"""The ``chains`` command line."""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from chains import terminal
from chains.errors import ChainsError, ChainsUsageError
from chains.loader import load_chain
from chains.model import Chain
from chains.targets import TARGETS, is_alive

__all__ = ["main"]

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


@main.command()
@click.argument("name")
def init(name: str) -> None:
    """Create folder NAME with a chain to start from: a streaming entrypoint, a dependency,
    a pytest test that runs it with run_local, and a .chainsignore.

    \b
    Examples:
      chains init my-chain
      cd my-chain && pytest && chains push chain.py
    """
    from chains.scaffold import FILES, scaffold

    folder = _guarded(lambda: scaffold(name, Path(".")))
    click.echo(f"created {folder}/ with {', '.join(FILES)}")
    click.echo(f"next: cd {shlex.quote(str(folder))} && pytest && chains push chain.py")


def _fail(message: str, code: int = 1) -> NoReturn:
    # click drops the colour where standard error is not a terminal.
    if message.startswith("error:"):
        message = click.style("error:", fg="red", bold=True) + message[len("error:") :]
    click.echo(message, err=True)
    sys.exit(code)


def _guarded(action: Callable[[], T]) -> T:
    """Run ``action``; a chains error becomes a readable message and exit code 1."""
    try:
        return action()
    except ChainsUsageError as exc:
        _report(exc)
        sys.exit(1)
    except ChainsError as exc:
        _fail(f"error: {exc}")


def _report(exc: ChainsUsageError) -> None:
    if exc.violations:
        count = len(exc.violations)
        click.echo(f"{count} problem{'s' if count != 1 else ''} found:", err=True)
        for violation in exc.violations:
            click.echo(f"  {violation}", err=True)
    else:
        click.echo(f"error: {exc}", err=True)


# -- check / generate --------------------------------------------------------------------------


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--entrypoint", metavar="NAME", help="The entrypoint chainlet, if none is marked.")
def check(file: str, entrypoint: str | None) -> None:
    """Check the chain in FILE and list every problem found, or summarise it.

    \b
    Examples:
      chains check chain.py
      chains check chain.py --entrypoint Entry
    """
    from chains.target_support import ignored_settings

    chain = _guarded(lambda: load_chain(file, entrypoint))
    click.echo(summary(chain, file))
    notes = ignored_settings(chain, "local")
    if notes:
        click.echo("notes (Baseten-only settings; the truss export writes them):")
        for note in notes:
            click.echo(f"  {note}")


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--entrypoint", metavar="NAME", help="The entrypoint chainlet, if none is marked.")
@click.option(
    "--format",
    "form",
    type=click.Choice(["svg", "mermaid", "dot", "json"]),
    default="svg",
    show_default=True,
    help="svg: a standalone picture; mermaid: for Markdown that renders it; dot: for Graphviz.",
)
@click.option("--out", type=click.Path(dir_okay=False), help="Write here instead of to standard output.")
def graph(file: str, entrypoint: str | None, form: str, out: str | None) -> None:
    """Draw the chain in FILE from its static description (nothing runs).

    \b
    Examples:
      chains graph chain.py --out chain.svg
      chains graph chain.py --format mermaid >> README.md
    """
    from chains.graph import ChainGraph, GraphFormat, render

    chain = _guarded(lambda: load_chain(file, entrypoint))
    text = render(ChainGraph.of(chain), GraphFormat(form))
    if out is None:
        click.echo(text, nl=False)
        return
    try:
        Path(out).write_text(text, encoding="utf-8")
    except OSError as exc:
        _fail(f"error: cannot write {out}: {exc.strerror}")
    click.echo(f"wrote the graph of chain {chain.name!r} ({form}) to {out}")


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


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--entrypoint", metavar="NAME", help="The entrypoint chainlet, if none is marked.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Where to write.")
@click.option("--k8s", is_flag=True, help="Also write Kubernetes manifests into --out/kubernetes.")
@click.option("--registry", metavar="PREFIX", help="--k8s: where the images are pushed.")
@click.option("--base-image", metavar="IMAGE", help="The Dockerfiles' base image (default python:3.11-slim).")
def generate(
    file: str, entrypoint: str | None, out_dir: str, k8s: bool, registry: str | None, base_image: str | None
) -> None:
    """Generate each chainlet's server, stubs, descriptor and Dockerfile into --out.

    \b
    Examples:
      chains generate chain.py --out build
      chains generate chain.py --out build --k8s --registry ghcr.io/me
    """
    from codegen import DEFAULT_BASE_IMAGE
    from codegen import generate as run_generator

    chain = _guarded(lambda: load_chain(file, entrypoint))
    base = base_image or DEFAULT_BASE_IMAGE
    result = _guarded(lambda: run_generator(chain, Path(file), Path(out_dir), base_image=base))
    for name, generated in result.chainlets.items():
        click.echo(f"{name}: {generated.directory}")
    if k8s:
        from chains.targets.kubernetes import write_generated_manifests

        written = _guarded(lambda: write_generated_manifests(chain, Path(file), result, registry=registry))
        click.echo(
            f"kubernetes: {written[0].parent} (kubectl apply -k {shlex.quote(str(written[0].parent))})"
        )


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--entrypoint", metavar="NAME", help="The entrypoint chainlet, if none is marked.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Where to write.")
def client(file: str, entrypoint: str | None, out_dir: str) -> None:
    """Generate a typed client package of the entrypoint into --out (needs only pydantic, httpx).

    \b
    Examples:
      chains client chain.py --out chain-client
      chains client examples/streaming/chain.py --out streaming-client
      pip install --no-deps chains-sdk ./streaming-client
    """
    from codegen.clientgen import generate_client

    chain = _guarded(lambda: load_chain(file, entrypoint))
    result = _guarded(lambda: generate_client(chain, Path(file), Path(out_dir)))
    click.echo(f"{result.package}: {result.directory}")


# -- push ----------------------------------------------------------------------------------------


def _pairs(option: str, metavar: str, pairs: tuple[str, ...]) -> dict[str, str]:
    values = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            _fail(f"error: {option} takes {metavar}, got {pair!r}")
        values[key] = value
    return values


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--entrypoint", metavar="NAME", help="The entrypoint chainlet, if none is marked.")
@click.option("--name", metavar="NAME", help="The chain's name (default: from mark_entrypoint or the class).")
@click.option(
    "--target",
    type=click.Choice(list(TARGETS)),
    default="local",
    show_default=True,
    help="Where it runs: local processes, docker containers, or files for another system.",
)
@click.option("--port", type=int, help="The entrypoint's port on 127.0.0.1 (default: any free one).")
@click.option("--secret", "secret_pairs", multiple=True, metavar="KEY=VALUE", help="A secret; repeatable.")
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
    "--api-key", envvar="CHAINS_API_KEY", help="Require this API key from the entrypoint's callers."
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
    from chains.target_support import ignored_settings
    from chains.targets import PushOptions, export_target, kind_of, options_for
    from chains.targets.state import chain_dir

    chain = _guarded(lambda: load_chain(file, entrypoint, name))
    kind = _guarded(lambda: kind_of(target))
    for note in ignored_settings(chain, target):
        click.echo(f"note: {note}", err=True)
    given = _pairs("--secret", "KEY=VALUE", secret_pairs)
    secrets = _guarded(lambda: collect_secrets(chain, given, secrets_file)) if kind == "running" else given
    model_urls = _pairs("--model-url", "NAME=URL", model_url_pairs)
    if address and target != "ray":
        _fail("error: --address names a Ray cluster: it is for --target ray")
    if model_urls and target != "truss":
        _fail("error: --model-url is for the truss target: other targets wire the chainlets' URLs themselves")

    # Built where used: a dry run of a running target takes none (--port on ray included).
    def make_options() -> PushOptions:
        return _guarded(
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
                cors_origins=_guarded(lambda: tuple(check_origin(origin) for origin in cors_origins)),
            )
        )

    if kind == "export":
        if not (dry_run or apply) or out_dir is None:
            _fail(f"error: target {target!r} writes files for another system: add --dry-run --out DIR")
        options = make_options()
        written = _guarded(lambda: export_target(target).export(chain, Path(file), options))
        if as_json:
            click.echo(json.dumps({"name": chain.name, "target": target, "files": [str(p) for p in written]}))
        else:
            click.echo(f"wrote {len(written)} file(s) for target {target!r} into {out_dir}")
        return
    if dry_run:
        from codegen import generate as run_generator

        out = Path(out_dir) if out_dir else chain_dir(chain.name) / "dry-run"
        result = _guarded(lambda: run_generator(chain, Path(file), out))
        if as_json:
            dirs = {n: str(c.directory) for n, c in result.chainlets.items()}
            click.echo(json.dumps({"name": chain.name, "target": target, "generated": dirs}))
        else:
            click.echo(f"dry run: generated chain {chain.name!r} into {out} (nothing started)")
        return
    previous = _running_state(chain.name)
    options = make_options()
    handle = _guarded(lambda: push_chain(chain, Path(file), target, options))
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

        _guarded(lambda: run_watch(Path(file), chain, entrypoint=entrypoint))


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
    from chains.server.openapi import example_arguments

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
    example = json.dumps(example_arguments(chain.entrypoint.endpoint))
    curl = (
        f"curl -sN {state.entrypoint_url}/run_remote -H 'Content-Type: application/json' "
        + ('-H "Authorization: Bearer $CHAINS_API_KEY" ' if with_key else "")
        + f"-d {shlex.quote(example)}"
    )
    return (
        f"chain {state.chain!r} is running (target {state.target})\n{table}\n"
        f"entrypoint: {state.entrypoint_url}  (its API, with a form to try it: {state.entrypoint_url}/docs)\n"
        f"try: {curl}\n"
        f"see it at work (graph, metrics, traces, logs) in a browser: chains ui {state.chain}\n"
        f"stop it with: chains stop {state.chain}"
    )


# -- status / logs / call / stop -----------------------------------------------------------------


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
    from chains.targets.state import list_chains, same_process

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
            ready = sum(p.state == "ready" for p in state.processes)
            health = _health(state) if is_alive(state) else "stale (supervisor gone)"
            click.echo(
                f"{state.chain}  {health}  {ready}/{len(state.processes)} ready  {state.entrypoint_url}"
            )
        return
    state = _guarded(lambda: find_state(name))
    if as_json:
        click.echo(state.model_dump_json(indent=2))
        return
    if not is_alive(state):
        click.echo(
            f"chain {name!r} is stale: its supervisor is gone and its processes are not supervised; "
            f"run `chains stop {name}` to clean up, or push it again",
            err=True,
        )
    failed = _failed_chainlets(state)
    if failed and is_alive(state):
        click.echo(
            f"chain {name!r} is degraded: {', '.join(failed)} failed for good and "
            f"{'is' if len(failed) == 1 else 'are'} not running; bring "
            f"{'it' if len(failed) == 1 else 'them'} back with `chains restart {name}"
            f"{' ' + failed[0] if len(failed) == 1 else ''}`",
            err=True,
        )
    rows: list[tuple[str, ...]] = [("CHAINLET", "URL", "PID", "STATE", "RESTARTS", "UPTIME")]
    for p in state.processes:
        # Other targets report their processes' health in the state itself.
        alive = same_process(p.pid, p.identity) if state.target == "local" else p.state == "ready"
        shown = p.state if alive or p.state in ("failed", "stopped", "restarting") else "gone"
        rows.append(
            (
                p.chainlet + (f"[{p.replica}]" if len(state.replicas(p.chainlet)) > 1 else ""),
                p.url,
                str(p.pid or "-"),
                shown,
                str(p.restarts),
                _uptime(p.started_at) if alive else "-",
            )
        )
    batching = [_batching(p.url) if p.state == "ready" else None for p in state.processes]
    if any(b is not None for b in batching):
        rows = [(*r, b or "-") for r, b in zip(rows, ["BATCHING", *batching], strict=True)]
    click.echo(f"chain {state.chain!r} (target {state.target}, entrypoint {state.entrypoint_url})")
    click.echo(terminal.table(rows, terminal=terminal.is_terminal(), state_column=3))


def _batching(url: str) -> str | None:
    """The queue and mean batch size of a batched chainlet, read from its /metrics."""
    import httpx

    from chains.metrics import batching_summary
    from chains.wire import METRICS

    try:
        response = httpx.get(url.rstrip("/") + METRICS, timeout=0.5)
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

    state = _guarded(lambda: find_state(name))
    if chainlet is not None and chainlet not in state.chainlet_names():
        _fail(
            f"error: chain {name!r} has no chainlet {chainlet!r}; it has: {', '.join(state.chainlet_names())}"
        )
    restarted = _guarded(lambda: restart_chain(state, chainlet, timeout))
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
        _fail(f"error: {exc}")
    if chainlet is not None and chainlet not in state.chainlet_names():
        _fail(
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
        _fail(f"error: {exc}")
    if not printed:
        click.echo(f"(no log lines yet for chain {name!r})", err=True)


def _stopped_logs(name: str, chainlet: str | None, lines: int) -> None:
    """The logs a stopped chain left behind, said to be a stopped chain's."""
    from chains.targets.logs import follow_files
    from chains.targets.state import chain_dir, iter_logs

    paths = _guarded(lambda: list(iter_logs(name)))
    if chainlet is not None:
        paths = [p for p in paths if p.stem == chainlet or p.stem.startswith(f"{chainlet}-")]
    if not paths:
        _fail(f"error: no chain named {name!r} is running, and none left logs in {chain_dir(name).parent}")
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
    "--timeout",
    type=float,
    default=DEFAULT_CALL_TIMEOUT_SEC,
    show_default=True,
    help="Give up when the chain is silent this many seconds (a stream: between items).",
)
def call(
    name: str, json_args: str | None, args_file: str | None, api_key: str | None, timeout: float
) -> None:
    """Call chain NAME's entrypoint and print the answer; streams print as they arrive.

    A WebSocket entrypoint gets each line of stdin as a message; its replies print as they
    arrive.

    \b
    Examples:
      chains call my-chain --json '{"text": "hello"}'
      chains call my-chain --file args.json --timeout 600
    """
    from chains.cli_call import CallFailed, call_entrypoint, converse_with_entrypoint
    from chains.deploy import find_state
    from chains.streaming import kind_named

    state = _guarded(lambda: find_state(name))
    if json_args is not None and args_file is not None:
        _fail("error: give the arguments with --json or --file, not both")
    text = Path(args_file).read_text() if args_file else (json_args or "{}")
    try:
        arguments = json.loads(text)
    except ValueError as exc:
        _fail(f"error: the arguments are not valid JSON: {exc}")
    if not isinstance(arguments, dict):
        _fail('error: the arguments must be a JSON object, e.g. --json \'{"prompt": "hi"}\'')
    if not is_alive(state):
        _fail(f"error: chain {name!r} is stale (its supervisor is gone); push it again")
    kind = _guarded(lambda: kind_named(state.entrypoint_kind))
    try:
        if kind.is_socket:  # a conversation: stdin's lines go out, the replies print as they come
            asyncio.run(converse_with_entrypoint(state.entrypoint_url, api_key=api_key))
            return
        asyncio.run(call_entrypoint(state.entrypoint_url, arguments, kind, api_key=api_key, timeout=timeout))
    except CallFailed as exc:
        from chains.source_map import to_user_files

        failed = _failed_chainlets(_guarded(lambda: find_state(name)))
        hint = f"\n{', '.join(failed)} failed for good: `chains restart {name}`" if failed else ""
        text = to_user_files(str(exc), Path(state.source).parent) if state.source else str(exc)
        _fail(f"error: {text}{hint}")


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

    folder = chain_dir(name)
    if not folder.is_dir():
        known = ", ".join(list_chains()) or "none"
        _fail(f"error: no chain named {name!r} (chains here: {known}); start it with `chains push FILE`")
    path = store.store_path(folder)
    console = Console(highlight=False)
    if request_id is None:
        traces = store.recent_traces(path, limit)
        if as_json:
            click.echo(json.dumps([t.to_json() for t in traces], indent=2))
        elif not traces:
            click.echo(f"no traces of chain {name!r} yet: call it, then look again", err=True)
        else:
            print_recent(console, name, traces)
        return
    spans = store.trace_spans(path, request_id)
    if not spans:
        _fail(
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
def ui(name: str, port: int, host: str) -> None:
    """Serve a web page of running chain NAME on this machine: its graph, states, live
    metrics, traces, logs and a form to call it.

    \b
    The page answers requests from this machine only; when the chain has an API key, the URL
    printed holds it, and the page asks for it.

    \b
    Examples:
      chains ui my-chain
      chains ui my-chain --port 8765
    """
    from chains.ui.serve import serve_dashboard

    def announce(url: str) -> None:
        click.echo(f"dashboard of chain {name!r}: {url}  (Ctrl-C to stop)")
        sys.stdout.flush()

    try:
        _guarded(lambda: serve_dashboard(name, host, port, announce))
    except KeyboardInterrupt:
        return


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

    stopped = _guarded(lambda: stop_chain(name, grace))
    if not stopped:
        click.echo(f"nothing of chain {name!r} was running; removed its leftover state")
        return
    count = sum(len(state.processes) for state in stopped)
    extra = f" in {len(stopped)} deployments" if len(stopped) > 1 else ""
    click.echo(f"stopped chain {name!r} ({count} process(es){extra})")
