"""Environments of truss's own, made once and cached under ~/.cache, for the truss export's tests.

``truss_python()`` has the ``truss`` package (its config loader, ``truss image build-context``).
``server_python(context)`` has what the image built from a build context would have: truss's
inference server's requirements and the chainlet's, from the context's requirements.txt.
When pip cannot install them, the tests that need them are skipped, saying so loudly.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import venv
from pathlib import Path

import pytest

TRUSS_VERSION = "0.18.36"


def _cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "chains-tests"


def _environment(home: Path, pip_args: list[str], what: str) -> Path:
    python = home / "bin" / "python"
    if (home / ".installed").is_file():
        return python
    venv.EnvBuilder(with_pip=True, clear=True).create(home)
    result = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", *pip_args],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if result.returncode != 0:
        pytest.skip(f"{what} NOT INSTALLABLE HERE, its checks skipped: pip said: {result.stderr[-600:]}")
    (home / ".installed").write_text(" ".join(pip_args))
    return python


def truss_python() -> Path:
    """A Python with ``truss`` installed."""
    return _environment(_cache() / f"truss-{TRUSS_VERSION}", [f"truss=={TRUSS_VERSION}"], "TRUSS")


def server_python(context: Path) -> Path:
    """A Python with what the image of the build context ``context`` installs (its requirements.txt
    under its constraints.txt), keyed by those files so that a change makes a new one."""
    requirements, constraints = context / "requirements.txt", context / "constraints.txt"
    digest = hashlib.sha256(requirements.read_bytes() + constraints.read_bytes()).hexdigest()[:12]
    home = _cache() / f"truss-server-{TRUSS_VERSION}-{digest}"
    return _environment(home, ["-r", str(requirements), "-c", str(constraints)], "TRUSS SERVER")
