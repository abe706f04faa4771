"""What the security tests share: a CHAINS_HOME of each module's own, and pushed chains.

Every chain a test pushes is stopped by it; traffic goes to 127.0.0.1 only.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from chains.deploy import ChainHandle, push_chain, stop_chain
from chains.loader import load_chain
from chains.targets import LocalOptions
from tests.helpers import unique_port
from tests.reliability.conftest import chains_home

__all__ = ["SAMPLE", "chains_home", "pushed"]

SAMPLE = Path(__file__).parent / "sample_chains" / "security_chains.py"


@contextmanager
def pushed(entrypoint: str, name: str, api_key: str | None = None) -> Iterator[ChainHandle]:
    """Push chain ``name`` with ``entrypoint`` to local processes, and stop it after."""
    chain = load_chain(SAMPLE, entrypoint, name)
    options = LocalOptions(timeout=60, api_key=api_key, entry_port=unique_port())
    handle = push_chain(chain, SAMPLE, "local", options)
    try:
        yield handle
    finally:
        stop_chain(name, grace=5)
