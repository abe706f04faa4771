"""Generated chainlet servers as benchmark targets: generate a chain with ``codegen`` and run the
generated ``server.py`` of its chainlets as real processes on 127.0.0.1, as ``chains push`` would.

>>> chain = generate_chain(CHAINS_DIR / "unary.py", out_dir)            # doctest: +SKIP
>>> with serve_chainlet(chain.chainlets["Echo"].directory, entrypoint=True) as server:  # doctest: +SKIP
...     harness.run_wrk(server.url("/run_remote"), body, harness.LoadSpec(16))
"""

from __future__ import annotations

import contextlib
import json
import secrets
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import chains_codegen
from benchmarks import harness
from chains.loader import load_chain

__all__ = ["CHAINS_DIR", "auth_headers", "generate_chain", "new_token", "serve_chainlet"]

CHAINS_DIR = Path(__file__).resolve().parent / "chains"


def generate_chain(chain_file: Path, out_dir: Path) -> chains_codegen.GeneratedChain:
    """Check and generate ``chain_file`` into ``out_dir``, one directory per chainlet."""
    return chains_codegen.generate(load_chain(chain_file), chain_file, out_dir)


def new_token() -> str:
    """A fresh internal token for one benchmark run, as ``chains push`` makes one per deployment."""
    return secrets.token_urlsafe(32)


def auth_headers(token: str) -> dict[str, str]:
    """What a stub sends to an internal chainlet (besides its request id and deadline)."""
    return {**harness.JSON_HEADERS, "Authorization": f"Bearer {token}"}


@contextlib.contextmanager
def serve_chainlet(
    directory: Path,
    *,
    entrypoint: bool,
    token: str,
    dependency_urls: Mapping[str, Sequence[str]] | None = None,
    argv: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    startup_timeout_s: float = 30.0,
) -> Iterator[harness.RunningServer]:
    """Run a generated chainlet's ``server.py`` on a free port until the block exits.

    The environment is what the local target gives a chainlet: ``CHAINS_IS_ENTRYPOINT=1`` on the
    entrypoint, the chain's internal token on every chainlet, and the URLs of its dependencies.
    ``argv`` replaces ``python server.py`` (``--port N`` is appended), for variants of the server.
    It counts as started once ``GET /readyz`` answers 200, that is once the chainlet is built.
    """
    port = harness.free_port()
    child_env = {
        "CHAINS_INTERNAL_TOKEN": token,
        "CHAINS_DEPENDENCY_URLS": json.dumps({k: list(v) for k, v in (dependency_urls or {}).items()}),
        "CHAINS_IS_ENTRYPOINT": "1" if entrypoint else "",
        **(env or {}),
    }
    command = [*(argv or [sys.executable, "server.py"]), f"--port={port}"]
    with harness.serve_command(
        command,
        port,
        ready_path="/readyz",
        ready_body=None,
        env=child_env,
        cwd=directory,
        startup_timeout_s=startup_timeout_s,
    ) as server:
        yield server
