"""Where a pushed chain keeps its async calls, and the secret its webhooks are signed with.

Both live in the chain's folder, not in one deployment's: a job queued before a re-push runs
after it, and a receiver's secret does not change with each push.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from chains.jobs.settings import JOBS_STORE_ENV, WEBHOOK_SECRET_ENV
from chains.targets.state import write_private

__all__ = ["JOBS_FILE", "WEBHOOK_SECRET_FILE", "job_environment", "webhook_secret"]

JOBS_FILE = "jobs.sqlite"
WEBHOOK_SECRET_FILE = "webhook_secret"


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


def job_environment(home: Path) -> dict[str, str]:
    """The entrypoint's variables for its job store (``CHAINS_JOBS_STORE=off`` in the pushing
    shell turns async calls off)."""
    store = os.environ.get(JOBS_STORE_ENV) or str(home / JOBS_FILE)
    env = {JOBS_STORE_ENV: store}
    if store != "off":
        env[WEBHOOK_SECRET_ENV] = webhook_secret(home)
    return env
