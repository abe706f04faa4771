"""``chains jobs``: a pushed chain's async calls, listed, shown, fetched, submitted, cancelled.

They are the entrypoint's async routes (docs/jobs.md) spoken to over HTTP, so the command shows
what any other client of the chain would see.
"""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from chains import terminal
from chains.cli.group import fail, guarded, main
from chains.cli.trust import ca_file_option, entrypoint_context, trust_hint

if TYPE_CHECKING:
    import httpx

    from chains.client_jobs import JobOptions
    from chains.targets.state import ChainState

__all__ = ["jobs", "submit_job"]


def _client(state: ChainState, api_key: str | None, ca_file: Path | None) -> httpx.Client:
    import httpx

    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    verify: ssl.SSLContext | bool = guarded(lambda: entrypoint_context(state, ca_file)) or True
    return httpx.Client(base_url=state.entrypoint_url, headers=headers, timeout=30, verify=verify)


@contextmanager
def _reaching(state: ChainState, ca_file: Path | None) -> Iterator[None]:
    """Fail, saying why, when the entrypoint cannot be reached or its certificate is refused."""
    import httpx

    from chains.cli.calling import untrusted_certificate

    try:
        yield
    except httpx.TransportError as exc:
        untrusted = untrusted_certificate(exc, state.entrypoint_url)
        if untrusted is not None:
            fail(f"error: {untrusted}; {trust_hint(state, ca_file)}")
        fail(f"error: could not reach {state.entrypoint_url}: {type(exc).__name__}: {exc}")


def _answer(response: httpx.Response, what: str) -> Any:
    if response.status_code == 200:
        return response.json()
    try:
        detail = response.json().get("detail", response.text)
    except ValueError:
        detail = response.text
    if response.status_code == 404 and "no route" in str(detail):
        fail(
            "error: this chain's entrypoint serves no async calls: push it again with this version of chains"
        )
    fail(f"error: {what} answered {response.status_code}: {detail}")


def submit_job(
    state: ChainState,
    arguments: dict[str, Any],
    *,
    api_key: str | None,
    options: JobOptions,
    ca_file: Path | None = None,
) -> str:
    """Submit ``arguments`` as an async call of ``state``'s chain; its request id. An https://
    entrypoint is trusted as ``chains call`` trusts it (``ca_file``, else the chain's own)."""
    body: dict[str, Any] = {"model_input": arguments, **options.fields()}
    with _client(state, api_key, ca_file) as client, _reaching(state, ca_file):
        answer = _answer(client.post("/async_run_remote", json=body), "the submission")
    request_id: str = answer["request_id"]
    return request_id


@main.command()
@click.argument("name")
@click.argument("request_id", required=False)
@click.option("--status", "status_filter", help="List only jobs in this status (QUEUED, FAILED, ...).")
@click.option("--limit", type=int, default=20, show_default=True, help="How many jobs to list.")
@click.option(
    "--output", "show_output", is_flag=True, help="Print the job's output (it must have succeeded)."
)
@click.option("--wait", "wait_sec", type=float, help="Wait up to this many seconds for the job to end.")
@click.option("--cancel", is_flag=True, help="Cancel the job, queued or running.")
@click.option("--api-key", envvar="CHAINS_API_KEY", help="The entrypoint's API key, if it has one.")
@ca_file_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def jobs(
    name: str,
    request_id: str | None,
    status_filter: str | None,
    limit: int,
    show_output: bool,
    wait_sec: float | None,
    cancel: bool,
    api_key: str | None,
    ca_file: Path | None,
    as_json: bool,
) -> None:
    """Chain NAME's async calls: the latest ones, or REQUEST_ID's status, output or cancellation.

    \b
    Examples:
      chains call my-chain --async --json '{"text": "hello"}'   # prints a request id
      chains jobs my-chain                                     # the latest jobs
      chains jobs my-chain REQUEST_ID --wait 600 --output      # its result, once it ends
      chains jobs my-chain REQUEST_ID --cancel
      chains jobs my-chain --ca-file proxy-ca.pem              # an https:// entrypoint

    An https:// entrypoint whose certificate a private authority issued is verified with that
    authority, as `chains call` verifies it: --ca-file, else the one recorded at push.
    """
    from chains.deploy import find_state

    state = guarded(lambda: find_state(name))
    with _client(state, api_key, ca_file) as client, _reaching(state, ca_file):
        if request_id is None:
            params: dict[str, Any] = {"limit": limit}
            if status_filter:
                params["status"] = status_filter
            listed = _answer(client.get("/async_request", params=params), "the job list")["requests"]
            if as_json:
                click.echo(json.dumps(listed, indent=2))
                return
            if not listed:
                click.echo(f"no async calls of {name} are kept")
                return
            rows = [("REQUEST ID", "STATUS", "CREATED", "ATTEMPTS", "WEBHOOK")]
            rows += [
                (
                    j["request_id"],
                    j["status"],
                    j["created_at"][:19],
                    f"{j['attempts']}/{j['max_attempts']}",
                    j["webhook_status"],
                )
                for j in listed
            ]
            click.echo(terminal.table(rows, terminal=terminal.is_terminal()))
            return
        path = f"/async_request/{request_id}"
        if cancel:
            answer = _answer(client.delete(path), "the cancellation")
            click.echo(json.dumps(answer, indent=2) if as_json else f"{request_id}: {answer['message']}")
            return
        status = _answer(client.get(path), "the status")
        if wait_sec is not None:
            deadline = time.monotonic() + wait_sec
            while status["status"] in ("QUEUED", "IN_PROGRESS") and time.monotonic() < deadline:
                time.sleep(0.5)
                status = _answer(client.get(path), "the status")
        if show_output:
            if status["status"] != "SUCCEEDED":
                errors = "; ".join(e["message"] for e in status["errors"])
                fail(f"error: {request_id} is {status['status']}{': ' + errors if errors else ''}")
            click.echo(json.dumps(_answer(client.get(path + "/output"), "the output"), indent=2))
            return
        click.echo(json.dumps(status, indent=2))
