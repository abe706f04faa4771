"""How the commands that speak to a pushed chain's entrypoint (``chains call``, ``chains jobs``)
trust an ``https://`` one: the ``--ca-file`` option, the SSL context it makes, and what to say
when the certificate is refused. One place, so that both commands trust alike.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import click

if TYPE_CHECKING:
    from chains.targets.state import ChainState

__all__ = ["CA_FILE_ENVVAR", "ca_file_option", "entrypoint_context", "trust_hint"]

CA_FILE_ENVVAR = "CHAINS_CA_FILE"

_F = TypeVar("_F", bound=Callable[..., object])


def ca_file_option(command: _F) -> _F:
    """The ``--ca-file`` option (``$CHAINS_CA_FILE``), as the ``ca_file`` parameter."""
    option = click.option(
        "--ca-file",
        type=click.Path(path_type=Path),
        envvar=CA_FILE_ENVVAR,
        help=(
            "The PEM certificate of the authority that issued an https:// entrypoint's certificate, "
            "trusted alone. Default: the one recorded when the chain was pushed (the ray target's proxy "
            f"authority), else the system's authorities. [env: {CA_FILE_ENVVAR}]"
        ),
    )
    return option(command)


def entrypoint_context(state: ChainState, ca_file: Path | None) -> ssl.SSLContext | None:
    """What an https:// entrypoint is verified with: ``--ca-file``, else the chain's own
    authority (recorded at push), else None (the system's authorities)."""
    if not state.entrypoint_url.startswith("https://"):
        return None  # plain HTTP: a CHAINS_CA_FILE set for other chains is no error here
    if ca_file is not None:
        from chains.tls import client_context

        return client_context(ca_file, given_as="--ca-file")
    return state.entrypoint_context()


def trust_hint(state: ChainState, ca_file: Path | None) -> str:
    """How to make the command trust the entrypoint's certificate, given what it trusted."""
    if ca_file is not None:
        return f"--ca-file {ca_file} did not issue it: pass the PEM certificate of the authority that did"
    if state.entrypoint_ca is not None:
        return (
            f"the authority the chain was pushed with ({state.entrypoint_ca}) did not issue it: pass "
            "the one that did with --ca-file PATH"
        )
    return (
        "if a private authority issued it, pass that authority's PEM certificate with --ca-file PATH "
        f"(or set {CA_FILE_ENVVAR})"
    )
