"""Truss Chains' ``push``: its arguments mapped onto chains' own :func:`chains.deploy.push`.

Truss's call is ``push(entrypoint, chain_name, publish, promote, only_generate_trusses,
remote, environment, progress_bar, include_git_info, disable_chain_download)``. The first
two mean the same here (the chainlet class or file, and the chain's name); the rest choose
what Baseten does with a deployment, so they are named in a warning and dropped. This is the
function ``chains.push`` is, so a Truss file's call works unchanged; chains' own push keeps
only chains' arguments.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from chains.chainlet import ChainletBase
from chains.deploy import ChainHandle
from chains.deploy import push as deploy_push
from chains.errors import ChainsUsageError

__all__ = ["BASETEN_PUSH_ARGUMENTS", "baseten_push_arguments", "push"]

# Truss's push() parameters after the chain name, in their order: a Truss file may give any
# of them by position.
BASETEN_PUSH_ARGUMENTS = (
    "publish",
    "promote",
    "only_generate_trusses",
    "remote",
    "environment",
    "progress_bar",
    "include_git_info",
    "disable_chain_download",
)


def baseten_push_arguments(positional: Sequence[Any], named: Mapping[str, Any]) -> list[str]:
    """The names of the Baseten-only arguments a Truss ``push`` call gave, by position after
    the chain name (``positional``) or by name (``named``); an argument that is neither
    Truss's nor chains' is refused, by name.

    >>> baseten_push_arguments([True], {"environment": "staging"})
    ['publish', 'environment']
    """
    unknown = sorted(set(named) - set(BASETEN_PUSH_ARGUMENTS))
    if len(positional) > len(BASETEN_PUSH_ARGUMENTS):
        unknown.append(f"{len(positional) + 2} positional arguments")
    if unknown:
        raise ChainsUsageError(
            f"push() got unexpected arguments: {', '.join(unknown)}; it takes the entrypoint, "
            "the chain name, and target=, name=, secrets=, port=, timeout=, api_key=, cors_origins="
        )
    return [*BASETEN_PUSH_ARGUMENTS[: len(positional)], *sorted(named)]


def push(
    entrypoint: type[ChainletBase] | str | Path,
    chain_name: str | None = None,
    *baseten_only: Any,
    target: str = "local",
    name: str | None = None,
    secrets: Mapping[str, str] | None = None,
    port: int | None = None,
    timeout: float = 60.0,
    api_key: str | None = None,
    cors_origins: Iterable[str] = (),
    **baseten_options: Any,
) -> ChainHandle:
    """Check, generate and start the chain of ``entrypoint`` (a chainlet class or a file),
    taking Truss Chains' arguments as well as chains' own::

        with chains.push(Entry, name="demo") as chain:
            assert chain.call(prompt="hi")

        chains.push(Entry, "demo", publish=True)  # Truss's call: warns that publish is ignored

    ``chain_name`` is Truss's name for ``name``. The Baseten-only arguments (``publish``,
    ``promote``, ``environment``, ...) are named in a warning, as they mean nothing off
    Baseten; anything else is refused. The rest is :func:`chains.deploy.push`.
    """
    if chain_name is not None and name is not None and chain_name != name:
        raise ChainsUsageError(f"push got two chain names, {chain_name!r} and {name!r}; give one")
    ignored = baseten_push_arguments(baseten_only, baseten_options)
    if ignored:
        warnings.warn(
            f"chains.push: {', '.join(ignored)} are Baseten-only options of Truss Chains and are "
            f"ignored on the {target} target",
            stacklevel=2,
        )
    return deploy_push(
        entrypoint,
        target=target,
        name=name or chain_name,
        secrets=secrets,
        port=port,
        timeout=timeout,
        api_key=api_key,
        cors_origins=cors_origins,
    )
