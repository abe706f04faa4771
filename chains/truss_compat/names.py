"""Truss Chains' names: those of chains' own classes, and those of what only Baseten runs.

``RPCOptions`` is Truss's name for :class:`~chains.rpc_options.StubOptions`, kept as an
alias of the same class so that a Truss file's ``chains.RPCOptions(...)`` works unchanged
and ``isinstance`` and the checks treat both spellings alike. Names of what Baseten alone
deploys (``chains.TrussChainlet``, ...) are no class here: the front door answers them with
:func:`baseten_only_message`, so that a file using one is told why rather than that the
attribute does not exist.
"""

from __future__ import annotations

from chains.rpc_options import StubOptions

__all__ = ["BASETEN_ONLY", "RPCOptions", "baseten_only_message", "written_name"]

# Truss's name for the same class (``truss_chains.RPCOptions``): an alias, not a second type.
RPCOptions = StubOptions

# Truss Chains' names for what only Baseten runs, with what each is.
BASETEN_ONLY: dict[str, str] = {
    "EngineBuilderLLMChainlet": "a TensorRT-LLM engine that Baseten builds and serves",
    "EngineBuilderLLMInput": "the input of a TensorRT-LLM engine that Baseten builds and serves",
    "TrussChainlet": "a Truss directory deployed on Baseten as a member of the chain",
    "WeightsSource": "weights that Baseten mirrors at deployment",
    "Environment": "a Baseten deployment environment",
}


def baseten_only_message(name: str) -> str | None:
    """Why ``chains.<name>`` is not there, when ``name`` is Truss's name for something only
    Baseten runs; None for any other name.

    >>> baseten_only_message("TrussChainlet").startswith("chains.TrussChainlet is a Truss directory")
    True
    >>> baseten_only_message("Nothing") is None
    True
    """
    what = BASETEN_ONLY.get(name)
    if what is None:
        return None
    return (
        f"chains.{name} is {what}: it runs on Baseten only, which chains cannot deploy to. "
        "Deploy that part with Truss Chains, and call it from this chain by URL (a "
        "chains.StubBase with from_url); see docs/migrating-from-truss.md"
    )


def written_name(value: object) -> str | None:
    """How a chain file names ``value``, when that is Truss's public name of a chains class
    (``StubOptions`` is written ``chains.RPCOptions`` in Truss files, and both work).

    >>> written_name(StubOptions)
    'chains.RPCOptions'
    """
    return "chains.RPCOptions" if value is StubOptions else None
