"""Commands on a chain file: ``init``, ``check``, ``graph``, ``generate`` and ``client``."""

from __future__ import annotations

import shlex
from pathlib import Path

import click

from chains.cli.group import fail, guarded, main
from chains.loader import load_chain
from chains.model import Chain


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

    folder = guarded(lambda: scaffold(name, Path(".")))
    click.echo(f"created {folder}/ with {', '.join(FILES)}")
    click.echo(f"next: cd {shlex.quote(str(folder))} && pytest && chains push chain.py")


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
    from chains.targets import ignored_settings

    chain = guarded(lambda: load_chain(file, entrypoint))
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

    chain = guarded(lambda: load_chain(file, entrypoint))
    text = render(ChainGraph.of(chain), GraphFormat(form))
    if out is None:
        click.echo(text, nl=False)
        return
    try:
        Path(out).write_text(text, encoding="utf-8")
    except OSError as exc:
        fail(f"error: cannot write {out}: {exc.strerror}")
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
    from chains_codegen import DEFAULT_BASE_IMAGE
    from chains_codegen import generate as run_generator

    chain = guarded(lambda: load_chain(file, entrypoint))
    base = base_image or DEFAULT_BASE_IMAGE
    result = guarded(lambda: run_generator(chain, Path(file), Path(out_dir), base_image=base))
    for name, generated in result.chainlets.items():
        click.echo(f"{name}: {generated.directory}")
    if k8s:
        from chains.targets.kubernetes import write_generated_manifests

        written = guarded(lambda: write_generated_manifests(chain, Path(file), result, registry=registry))
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
    from chains_codegen.clientgen import generate_client

    chain = guarded(lambda: load_chain(file, entrypoint))
    result = guarded(lambda: generate_client(chain, Path(file), Path(out_dir)))
    click.echo(f"{result.package}: {result.directory}")
