"""Streaming async calls: every event is kept and numbered, read live or later, and a reader
cut mid-stream comes back for the rest of the same run (counted in the chain's log), with
httpx and with a real browser's EventSource through a real nginx that cuts idle streams."""

from __future__ import annotations

from pathlib import Path

import httpx

from chains.deploy import ChainHandle
from chains.streaming.sse import SSE
from tests.jobs.conftest import Api, log_lines


def read_events(
    client: httpx.Client, job: str, *, last: int | None = None, stop_after: int | None = None
) -> list[SSE]:
    """The events of ``job`` from the one after ``last``; cut after ``stop_after`` of them."""
    headers = {} if last is None else {"last-event-id": str(last)}
    events: list[SSE] = []
    with client.stream("GET", f"/async_request/{job}/events", headers=headers) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"] == "text/event-stream"
        buffer = b""
        for chunk in response.iter_bytes():
            buffer += chunk
            while b"\n\n" in buffer:
                raw, buffer = buffer.split(b"\n\n", 1)
                event = _parse(raw.decode())
                if event.data == "" and event.event is None and event.id is None:
                    continue  # the retry: field alone
                events.append(event)
                if stop_after is not None and len(events) == stop_after:
                    return events  # the connection is closed here, mid-stream
    return events


def _parse(raw: str) -> SSE:
    fields: dict[str, list[str]] = {}
    for line in raw.split("\n"):
        name, _, value = line.partition(": ")
        fields.setdefault(name, []).append(value)
    return SSE(
        data="\n".join(fields.get("data", [""])),
        event=fields.get("event", [None])[0],
        id=fields.get("id", [None])[0],
    )


def tokens(events: list[SSE]) -> list[str]:
    return [e.data for e in events if e.event is None]


def test_a_streaming_job_keeps_every_event_numbered_in_order(streaming: ChainHandle, tmp_path: Path) -> None:
    api = Api(streaming.entrypoint_url)
    log = tmp_path / "runs"
    job = api.submit({"count": 20, "log": str(log)})
    status = api.wait(job, {"SUCCEEDED", "FAILED"}, timeout=60)
    assert status["status"] == "SUCCEEDED" and status["events"] == 21  # 20 tokens and the end
    events = read_events(api.http, job)
    assert tokens(events) == [f"t{i}" for i in range(20)]
    assert [e.id for e in events] == [str(i) for i in range(1, 22)]
    assert events[-1].event == "end"
    # From any id, the rest; the same run, read again.
    assert tokens(read_events(api.http, job, last=15)) == [f"t{i}" for i in range(15, 20)]
    assert log_lines(log) == ["run"]
    assert api.http.get(f"/async_request/{job}/output").status_code == 409


def test_a_reader_cut_mid_stream_resumes_the_same_run_live(streaming: ChainHandle, tmp_path: Path) -> None:
    api = Api(streaming.entrypoint_url)
    log = tmp_path / "runs"
    job = api.submit({"count": 30, "log": str(log), "gap": 0.1})
    first = read_events(api.http, job, stop_after=5)
    assert api.status(job)["status"] == "IN_PROGRESS"  # the cut did not end the run
    rest = read_events(api.http, job, last=int(first[-1].id or 0))
    assert tokens(first) + tokens(rest) == [f"t{i}" for i in range(30)]
    assert rest[-1].event == "end"
    assert log_lines(log) == ["run"]


def test_a_bad_resume_point_is_refused(streaming: ChainHandle, tmp_path: Path) -> None:
    api = Api(streaming.entrypoint_url)
    job = api.submit({"count": 2, "log": str(tmp_path / "runs")})
    answer = api.http.get(f"/async_request/{job}/events", headers={"last-event-id": "abc"})
    assert answer.status_code == 400 and "Last-Event-ID" in answer.json()["detail"]


PAGE = """<!doctype html><meta charset="utf-8"><title>tokens</title>
<script>
  window.seen = []; window.opens = 0; window.done = false;
  const source = new EventSource(new URLSearchParams(location.search).get("events"));
  source.onopen = () => { window.opens += 1; };
  source.onmessage = (event) => { window.seen.push(event.data); };
  source.addEventListener("end", () => { window.done = true; source.close(); });
</script>"""


def test_an_eventsource_cut_by_nginx_reconnects_and_shows_every_token_once(
    streaming: ChainHandle, tmp_path: Path, page: object
) -> None:
    from tests.browser_support import serve_directory
    from tests.nginx import Nginx, Site, nginx_binary

    api = Api(streaming.entrypoint_url)
    log = tmp_path / "runs"
    # A pause of 3 s after token 9: nginx gives up on an upstream silent for 1 s, cutting the stream.
    job = api.submit({"count": 20, "log": str(log), "gap": 0.05, "pause_after": 9, "pause": 3.0})
    site = Site(
        "events",
        streaming.entrypoint_url,
        ["proxy_read_timeout 1s;", "add_header Access-Control-Allow-Origin *;"],
    )
    proxy = Nginx(nginx_binary(), tmp_path / "nginx", [site]).start()
    (tmp_path / "pages").mkdir()
    (tmp_path / "pages" / "tokens.html").write_text(PAGE)
    origin, server = serve_directory(tmp_path / "pages", "127.0.0.2")
    try:
        events_url = f"{site.url}/async_request/{job}/events"
        page.goto(f"{origin}/tokens.html?events={events_url}")  # type: ignore[attr-defined]
        page.wait_for_function("window.done === true", timeout=30_000)  # type: ignore[attr-defined]
        seen = page.evaluate("window.seen")  # type: ignore[attr-defined]
        opens = page.evaluate("window.opens")  # type: ignore[attr-defined]
        assert seen == [f"t{i}" for i in range(20)], seen
        assert opens >= 2, "nginx did not cut the stream: the test proves nothing"
        assert log_lines(log) == ["run"]  # reconnecting never ran the job again
        assert "upstream timed out" in proxy.errors()
    finally:
        server.shutdown()
        server.server_close()
        proxy.stop()
    assert api.status(job)["status"] == "SUCCEEDED"
