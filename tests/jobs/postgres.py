"""A real PostgreSQL server for the job store's tests: started once a session, on 127.0.0.1, in
a folder of the test run's own, and stopped by the fixture that started it.

PostgreSQL refuses to run as root: as root (CI) the server runs as the ``postgres`` user the
Debian package made. Without PostgreSQL's programs the tests that need it skip, unless
``CHAINS_REQUIRE_POSTGRES`` is set (CI sets it): then they fail.

The ``postgres`` fixture is a plugin of the root conftest, so that tests of other folders (a
chain pushed to ray with its jobs in PostgreSQL) share the one server of the session.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import unique_port


def _binaries() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if found:
        return Path(found[-1]).parent
    pg_ctl = shutil.which("pg_ctl")
    return Path(pg_ctl).parent if pg_ctl else None


@dataclass
class Postgres:
    bin: Path
    data: Path
    port: int
    user: str | None  # who the server runs as (None: this process's user)

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        command = [str(self.bin / args[0]), *args[1:]]
        if self.user is not None:
            command = ["runuser", "-u", self.user, "--", *command]
        return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)

    def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.data}"
        started = self._run(
            "pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.data / "log"), "-w", "start"
        )
        if started.returncode != 0:
            log = (self.data / "log").read_text() if (self.data / "log").exists() else ""
            raise RuntimeError(f"PostgreSQL did not start: {started.stderr}{log[-2000:]}")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def restart(self) -> None:
        self.stop()
        self.start()


def start_postgres() -> Postgres:
    binaries = _binaries()
    if binaries is None:
        message = "PostgreSQL's programs are missing (apt-get install postgresql)"
        if os.environ.get("CHAINS_REQUIRE_POSTGRES"):
            pytest.fail(message)
        pytest.skip(message)
    folder = Path(tempfile.mkdtemp(prefix="chains-pg-"))
    user = "postgres" if os.geteuid() == 0 else None
    if user is not None:
        shutil.chown(folder, user)
    server = Postgres(binaries, folder / "data", unique_port(), user)
    made = server._run("initdb", "-D", str(server.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
    if made.returncode != 0:
        raise RuntimeError(f"initdb failed: {made.stderr}")
    server.start()
    return server


def remove(server: Postgres) -> None:
    server.stop()
    shutil.rmtree(server.data.parent, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    """One PostgreSQL server for the session's tests."""
    server = start_postgres()
    try:
        yield server
    finally:
        remove(server)
