"""Where a pushed chain keeps its async calls, and the secret its webhooks are signed with.

Both outlive any one deployment: a job queued before a re-push runs after it, and a
receiver's secret does not change with each push. Where the store may be depends on how far
a chain's entrypoint spreads: on one machine an embedded SQLite file (the chain's folder
locally, a named volume on docker), which replicas on that host share through its WAL;
beyond one machine only a server every replica reaches, PostgreSQL, named by the pushing
shell's ``CHAINS_JOBS_STORE``.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Callable
from pathlib import Path

from chains.errors import ChainsUsageError
from chains.jobs.postgres_store import is_postgres_url
from chains.jobs.settings import JOBS_STORE_ENV, WEBHOOK_SECRET_ENV
from chains.targets.state import write_private

__all__ = [
    "JOBS_FILE",
    "JOBS_MOUNT",
    "JOBS_OFF_HINT",
    "WEBHOOK_SECRET_FILE",
    "check_postgres_driver",
    "job_environment",
    "jobs_volume",
    "shared_job_environment",
    "webhook_secret",
]

JOBS_FILE = "jobs.sqlite"
# Where a container's job store volume is mounted; the image makes the folder the chainlet
# user's, which a new volume takes on.
JOBS_MOUNT = "/var/lib/chains/jobs"
WEBHOOK_SECRET_FILE = "webhook_secret"
JOBS_OFF_HINT = (
    "set CHAINS_JOBS_STORE=postgresql://USER:PASSWORD@HOST:5432/DB (a server every node reaches) "
    "in the shell that pushes, then push again (docs/jobs.md, Where jobs are stored)"
)


def webhook_secret(home: Path) -> str:
    """The chain's webhook secret: ``CHAINS_WEBHOOK_SECRET`` in the pushing shell, else the one
    made at the chain's first push and kept owner-only in its folder."""
    given = os.environ.get(WEBHOOK_SECRET_ENV)
    if given:
        return given
    path = home / WEBHOOK_SECRET_FILE
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        secret = "whsec_" + secrets.token_urlsafe(32)
        write_private(path, secret + "\n")
        return secret


def jobs_volume(chain: str) -> str:
    """The docker volume holding chain ``chain``'s ``jobs.sqlite``: named by the chain, not a
    deployment, so that it outlives re-pushes and ``chains stop``."""
    return f"chains-{chain}-jobs"


def job_environment(home: Path, default_store: str | None = None) -> dict[str, str]:
    """The entrypoint's variables for its job store on one host: the pushing shell's
    ``CHAINS_JOBS_STORE`` (``off`` turns async calls off), else ``default_store`` (the file's
    path as the entrypoint sees it), else ``jobs.sqlite`` in the chain's folder ``home``."""
    given = os.environ.get(JOBS_STORE_ENV)
    if given and default_store is not None and given != "off" and not is_postgres_url(given):
        raise ChainsUsageError(
            f"{JOBS_STORE_ENV}={given!r} names a file on this machine, which a container cannot "
            f"see: unset it (jobs are kept in the volume that holds {default_store}), or give a "
            "postgresql:// URL, or off"
        )
    store = given or default_store or str(home / JOBS_FILE)
    env = {JOBS_STORE_ENV: store}
    if store != "off":
        env[WEBHOOK_SECRET_ENV] = webhook_secret(home)
    return env


def shared_job_environment(home: Path, target: str, say: Callable[[str], None]) -> dict[str, str]:
    """The entrypoint's variables for a job store its replicas on many hosts share: the
    pushing shell's ``CHAINS_JOBS_STORE``, a ``postgresql://`` URL; without one async calls
    are off, and ``say`` is told how to turn them on."""
    given = os.environ.get(JOBS_STORE_ENV)
    if not given:
        say(
            f"async calls (POST /async_run_remote) are off on target {target}: to turn them on, "
            + JOBS_OFF_HINT
        )
        return {}
    if given == "off":
        return {}
    if not is_postgres_url(given):
        raise ChainsUsageError(
            f"{JOBS_STORE_ENV}={given!r} is not a postgresql:// URL: target {target} runs the "
            "entrypoint on several machines, which cannot share one SQLite file; give "
            "postgresql://USER:PASSWORD@HOST:5432/DB of a server every node reaches, or off"
        )
    return {JOBS_STORE_ENV: given, WEBHOOK_SECRET_ENV: webhook_secret(home)}


def check_postgres_driver(jobs: dict[str, str], requirements: Path, entrypoint: str) -> None:
    """Refuse a push whose entrypoint image would meet its PostgreSQL job store with no driver:
    the image installs only what ``requirements`` (its generated ``requirements.txt``) lists,
    and the failure would otherwise show only as the container's crash on start."""
    if not is_postgres_url(jobs.get(JOBS_STORE_ENV, "")):
        return
    listed = requirements.read_text(encoding="utf-8") if requirements.exists() else ""
    if re.search(r"^\s*psycopg\b", listed, re.MULTILINE | re.IGNORECASE):
        return
    raise ChainsUsageError(
        f"{JOBS_STORE_ENV} names a PostgreSQL server, and the image of the entrypoint {entrypoint} "
        "has no driver for it: add 'psycopg[binary]' to its DockerImage(pip_requirements=[...]), "
        f"or unset {JOBS_STORE_ENV} (or set it to off)"
    )
