"""A real PostgreSQL server for the job store's tests: started once a session, on 127.0.0.1, in
a folder of the test run's own, and stopped by the fixture that started it.

PostgreSQL refuses to run as root: as root (CI) the server runs as the ``postgres`` user the
Debian package made. Without PostgreSQL's programs the tests that need it skip, unless
``CHAINS_REQUIRE_POSTGRES`` is set (CI sets it): then they fail.

The ``postgres`` fixture is a plugin of the root conftest, so that tests of other folders (a
chain pushed to ray with its jobs in PostgreSQL) share the one server of the session.

Containers cannot reach 127.0.0.1 of the host, so the docker tests start a second server with
:func:`start_postgres` that also listens on an address of a bridge of the engine's, and lets in
only the given subnets, with a password (tests/docker/conftest.py). The first server stays on
loopback, with no password, as before.
"""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
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
    also_listen: tuple[str, ...] = ()  # addresses besides 127.0.0.1
    password: str | None = None  # of the postgres user, asked of clients of those addresses

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def url_at(self, host: str) -> str:
        """The URL of the server at another address it listens on, with the password."""
        assert host in self.also_listen and self.password is not None
        return f"postgresql://postgres:{self.password}@{host}:{self.port}/postgres"

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        command = [str(self.bin / args[0]), *args[1:]]
        if self.user is not None:
            command = ["runuser", "-u", self.user, "--", *command]
        return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)

    def start(self) -> None:
        addresses = ",".join(("127.0.0.1", *self.also_listen))
        options = f"-p {self.port} -c listen_addresses={addresses} -k {self.data}"
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


@dataclass(frozen=True)
class ReachablePostgres:
    """A test server and the address that containers or a swarm's tasks reach it at."""

    server: Postgres
    host: str

    @property
    def url(self) -> str:
        """For the chains' containers (and this process): the server at ``host``, with its password."""
        return self.server.url_at(self.host)

    @property
    def local_url(self) -> str:
        return self.server.url


def start_postgres(also_listen: Sequence[str] = (), clients: Sequence[str] = ()) -> Postgres:
    """A server in a new folder, on 127.0.0.1 (trusted, as initdb sets it up) and on
    ``also_listen``, where only clients of the subnets ``clients`` get in, with the postgres
    user's password."""
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
    password = secrets.token_urlsafe(18) if clients else None
    server = Postgres(binaries, folder / "data", unique_port(), user, tuple(also_listen), password)
    made = server._run("initdb", "-D", str(server.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
    if made.returncode != 0:
        raise RuntimeError(f"initdb failed: {made.stderr}")
    if clients:
        # The rules are read top down: these come after initdb's trusted loopback lines, and
        # nothing else matches, so any other address is refused.
        rules = "".join(f"host all postgres {subnet} scram-sha-256\n" for subnet in clients)
        with (server.data / "pg_hba.conf").open("a") as hba:
            hba.write(rules)
    server.start()
    if password is not None:
        # Through the server's socket: initdb's trust rule for local connections applies.
        sql = f"ALTER USER postgres PASSWORD '{password}'"
        set_password = server._run(
            "psql", "-h", str(server.data), "-p", str(server.port), "-U", "postgres", "-c", sql
        )
        if set_password.returncode != 0:
            remove(server)
            raise RuntimeError(f"the postgres user's password was not set: {set_password.stderr}")
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
