"""Environments of truss's own, made once and cached under ~/.cache, for the truss export's tests.

``truss_python()`` has the ``truss`` package (its config loader, ``truss image build-context``).
``server_python(context)`` has what the image built from a build context would have: truss's
inference server's requirements and the chainlet's, from the context's requirements.txt.
When pip cannot install them, the tests that need them are skipped, saying so loudly.

Test runs share the cache, and may run at the same time: an environment is built by one run
at a time (an exclusive ``flock`` on ``<name>.lock`` beside it, the others waiting and then
using what it built), in a folder of its own, and published by renaming a symbolic link to
that folder onto ``<name>``, so that ``<name>`` is either absent or whole. The folder is not
renamed itself: a virtual environment's scripts name its path in their first line.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

TRUSS_VERSION = "0.18.36"


def _cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "chains-tests"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if need be); it goes with the process."""
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _environment(home: Path, pip_args: list[str], what: str) -> Path:
    python = home / "bin" / "python"
    if (home / ".installed").is_file():
        return python
    home.parent.mkdir(parents=True, exist_ok=True)
    with _locked(home.with_name(home.name + ".lock")):
        if (home / ".installed").is_file():  # another run built it while this one waited
            return python
        built = Path(tempfile.mkdtemp(prefix=f"{home.name}.", dir=home.parent))
        try:
            venv.EnvBuilder(with_pip=True, clear=True).create(built)
            result = subprocess.run(
                [str(built / "bin" / "python"), "-m", "pip", "install", "--quiet", *pip_args],
                capture_output=True,
                text=True,
                timeout=900,
            )
            if result.returncode != 0:
                pytest.skip(
                    f"{what} NOT INSTALLABLE HERE, its checks skipped: pip said: {result.stderr[-600:]}"
                )
            (built / ".installed").write_text(" ".join(pip_args))
            _publish(built, home)
        except BaseException:
            shutil.rmtree(built, ignore_errors=True)
            raise
    return python


def _publish(built: Path, home: Path) -> None:
    """Make ``home`` a link to ``built`` in one step; what stood there before goes."""
    link = built.with_name(built.name + ".link")
    link.symlink_to(built.name)
    if home.is_dir() and not home.is_symlink():
        # A folder an interrupted build left (it has no .installed): a link cannot replace it.
        shutil.rmtree(home)
    previous = home.resolve() if home.is_symlink() else None
    os.replace(link, home)
    if previous is not None and previous != built.resolve():
        shutil.rmtree(previous, ignore_errors=True)


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
