"""Which job store each kind of target hands its entrypoint, from the pushing shell's
``CHAINS_JOBS_STORE``: a file on one host, a PostgreSQL URL beyond it, and the refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from chains.errors import ChainsUsageError
from chains.targets.job_env import check_postgres_driver, job_environment, shared_job_environment

URL = "postgresql://chains:pw@db.internal:5432/jobs"


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CHAINS_JOBS_STORE", raising=False)
    monkeypatch.delenv("CHAINS_WEBHOOK_SECRET", raising=False)


def test_one_host_defaults_to_a_file_and_keeps_one_webhook_secret(tmp_path: Path) -> None:
    local = job_environment(tmp_path)
    assert local["CHAINS_JOBS_STORE"] == str(tmp_path / "jobs.sqlite")
    docker = job_environment(tmp_path, default_store="/var/lib/chains/jobs/jobs.sqlite")
    assert docker["CHAINS_JOBS_STORE"] == "/var/lib/chains/jobs/jobs.sqlite"
    assert local["CHAINS_WEBHOOK_SECRET"] == docker["CHAINS_WEBHOOK_SECRET"]
    assert docker["CHAINS_WEBHOOK_SECRET"].startswith("whsec_")


def test_a_host_file_is_refused_for_a_container(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHAINS_JOBS_STORE", "/srv/jobs.sqlite")
    assert job_environment(tmp_path)["CHAINS_JOBS_STORE"] == "/srv/jobs.sqlite"  # local: its own file
    with pytest.raises(ChainsUsageError, match="a container cannot see"):
        job_environment(tmp_path, default_store="/var/lib/chains/jobs/jobs.sqlite")
    monkeypatch.setenv("CHAINS_JOBS_STORE", "off")
    assert job_environment(tmp_path, default_store="/x") == {"CHAINS_JOBS_STORE": "off"}


def test_many_hosts_need_a_url_and_say_so_once_without_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    said: list[str] = []
    assert shared_job_environment(tmp_path, "swarm", said.append) == {}
    assert (
        len(said) == 1 and "off on target swarm" in said[0] and "CHAINS_JOBS_STORE=postgresql://" in said[0]
    )
    monkeypatch.setenv("CHAINS_JOBS_STORE", "off")
    assert shared_job_environment(tmp_path, "swarm", said.append) == {} and len(said) == 1
    monkeypatch.setenv("CHAINS_JOBS_STORE", str(tmp_path / "jobs.sqlite"))
    with pytest.raises(ChainsUsageError, match="cannot share one SQLite file"):
        shared_job_environment(tmp_path, "ray", said.append)
    monkeypatch.setenv("CHAINS_JOBS_STORE", URL)
    env = shared_job_environment(tmp_path, "ray", said.append)
    assert env["CHAINS_JOBS_STORE"] == URL and env["CHAINS_WEBHOOK_SECRET"].startswith("whsec_")


def test_an_image_without_a_postgres_driver_is_refused_before_it_is_built(tmp_path: Path) -> None:
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("numpy>=2\n")
    check_postgres_driver({"CHAINS_JOBS_STORE": "/var/lib/chains/jobs/jobs.sqlite"}, requirements, "Entry")
    with pytest.raises(ChainsUsageError, match=r"add 'psycopg\[binary\]'"):
        check_postgres_driver({"CHAINS_JOBS_STORE": URL}, requirements, "Entry")
    requirements.write_text("numpy>=2\npsycopg[binary]>=3.1\n")
    check_postgres_driver({"CHAINS_JOBS_STORE": URL}, requirements, "Entry")
