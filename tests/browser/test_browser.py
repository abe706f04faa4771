"""The JS client, EventSource and CORS in a real headless Chromium, from pages on other origins.

Each page is served from 127.0.0.2 (allowed by the test chains) or 127.0.0.3 (allowed by
none); the chains listen on 127.0.0.1. What the chain did is counted on the server, from
its /metrics.
"""

from __future__ import annotations

from typing import Any

import httpx

from tests.browser_support import API_KEY, metric
from tests.helpers import wait_until

# Opens an EventSource and resolves with what it received once it is closed for good: by
# the page on the `end` event (close_on_end), or by the browser itself (a refusal, a 204).
OPEN_EVENT_SOURCE = """
(url, closeOnEnd) => new Promise((resolve) => {
  const source = new EventSource(url);
  const got = { messages: [], ids: [], named: [], errors: 0 };
  window.lastSource = source;
  source.onmessage = (e) => { got.messages.push(e.data); got.ids.push(e.lastEventId); };
  for (const name of ["header", "footer", "end", "error"]) {
    source.addEventListener(name, (e) => {
      if (e.data !== undefined) { got.named.push(name); got.ids.push(e.lastEventId); }
      if (name === "end" && closeOnEnd) { source.close(); resolve(got); }
    });
  }
  source.onerror = () => {
    got.errors += 1;
    if (source.readyState === EventSource.CLOSED) resolve(got);
  };
})
"""


def _client(page: Any, origin: str) -> None:
    page.goto(f"{origin}/index.html")


def _calls(url: str, status: int, key: str | None = None) -> float:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    text = httpx.get(f"{url}/metrics", headers=headers, timeout=10).text
    return metric(text, "chains_calls_total", status=str(status))


def test_the_js_client_streams_every_token_of_the_streaming_example(
    page: Any, page_origin: str, streaming_chain: Any
) -> None:
    expected = streaming_chain.call(prompt="tokens for a page", max_tokens=6)
    _client(page, page_origin)
    got = page.evaluate(
        """async ([url]) => {
          const { stream } = await import(url + "/client.js");
          const tokens = [];
          const answer = stream(url, { prompt: "tokens for a page", max_tokens: 6 });
          for await (const token of answer) tokens.push(token);
          return { tokens, header: answer.header ?? null, footer: answer.footer ?? null };
        }""",
        [streaming_chain.entrypoint_url],
    )
    assert got["tokens"] == expected
    assert len(expected) == 6 + 4  # the summary, six tokens, the usage line in three pieces
    assert got["header"] is None and got["footer"] is None  # a text stream declares neither


def test_an_event_source_gets_every_event_and_the_stream_is_not_run_again(
    page: Any, page_origin: str, streaming_chain: Any
) -> None:
    url = streaming_chain.entrypoint_url
    generator = streaming_chain.chainlets["Generator"][0]
    expected = streaming_chain.call(prompt="one run only", max_tokens=5)
    runs, generated, ended = _calls(url, 200), _calls(generator, 200), _calls(url, 204)
    _client(page, page_origin)
    # The page does not close the source on `end`: the browser reconnects, and the 204 the
    # reconnect gets is what stops it.
    got = page.evaluate(
        f"([url]) => ({OPEN_EVENT_SOURCE})(url + '/run_remote?prompt=one+run+only&max_tokens=5', false)",
        [url],
    )
    assert got["messages"] == expected
    assert got["named"] == ["end"]
    assert len(set(got["ids"])) == len(got["ids"]) == len(expected) + 1
    assert got["ids"][-1].endswith(":end")
    assert got["errors"] == 2  # the connection closing after `end`, then the 204
    assert _calls(url, 200) - runs == 1
    assert _calls(url, 204) - ended == 1
    assert _calls(generator, 200) - generated == 1


def test_a_page_of_an_origin_not_allowed_is_refused(
    page: Any, other_origin: str, streaming_chain: Any
) -> None:
    url = streaming_chain.entrypoint_url
    generator = streaming_chain.chainlets["Generator"][0]
    runs, generated = _calls(url, 200), _calls(generator, 200)
    _client(page, other_origin)
    got = page.evaluate(
        f"""async ([url]) => {{
          const {{ stream }} = await import(url + "/client.js");  // public code: any page may load it
          let failure = null;
          try {{
            for await (const token of stream(url, {{ prompt: "refused" }})) {{}}
          }} catch (e) {{
            failure = e.name + ": " + e.message;
          }}
          const source = await ({OPEN_EVENT_SOURCE})(url + "/run_remote?prompt=refused", false);
          return {{ failure, source }};
        }}""",
        [url],
    )
    assert got["failure"] == "TypeError: Failed to fetch"
    assert got["source"]["messages"] == [] and got["source"]["named"] == []
    assert _calls(url, 200) == runs and _calls(generator, 200) == generated


def test_with_an_api_key_only_the_key_in_a_header_or_a_stream_ticket_works(
    page: Any, page_origin: str, typed_chain: Any
) -> None:
    url = typed_chain.entrypoint_url
    runs, refused = _calls(url, 200, API_KEY), _calls(url, 401, API_KEY)
    _client(page, page_origin)
    got = page.evaluate(
        f"""async ([url, key]) => {{
          const client = await import(url + "/client.js");
          const open = {OPEN_EVENT_SOURCE};
          const out = {{}};
          try {{
            for await (const part of client.stream(url, {{ count: 2 }})) {{}}
          }} catch (e) {{
            out.withoutKey = {{ name: e.name, type: e.type, status: e.status }};
          }}
          const answer = client.stream(url, {{ count: 3, tags: ["a", "b"] }}, {{ apiKey: key }});
          out.parts = [];
          for await (const part of answer) out.parts.push(part);
          out.header = answer.header;
          out.footer = answer.footer;
          out.noTicket = await open(url + "/run_remote?count=2", true);
          out.keyAsTicket = await open(url + "/run_remote?count=2&chains_ticket=" + key, true);
          out.keyInUrl = await open(url + "/run_remote?count=2&api_key=" + key, true);
          const args = {{ count: 2, tags: ["x", "y"] }};
          out.ticketUrl = await client.eventSourceUrl(url, args, {{ apiKey: key }});
          out.withTicket = await open(out.ticketUrl, true);
          return out;
        }}""",
        [url, API_KEY],
    )
    assert got["withoutKey"] == {"name": "ChainError", "type": "HTTPError", "status": 401}
    assert got["header"] == {"count": 3, "tags": ["a", "b"]}
    assert got["parts"] == [{"text": "a", "index": 0}, {"text": "b", "index": 1}, {"text": "a", "index": 2}]
    assert got["footer"] == {"parts": 3}
    for refused_source in ("noTicket", "keyAsTicket", "keyInUrl"):
        assert got[refused_source]["messages"] == [] and got[refused_source]["named"] == [], refused_source
    assert API_KEY not in got["ticketUrl"] and "chains_ticket=" in got["ticketUrl"]
    assert got["withTicket"]["messages"] == ['{"text":"x","index":0}', '{"text":"y","index":1}']
    assert got["withTicket"]["named"] == ["header", "footer", "end"]
    assert _calls(url, 200, API_KEY) - runs == 2  # the fetch stream with the key, the ticket's
    assert _calls(url, 401, API_KEY) - refused == 4  # no key, no ticket, the key as ticket, in the URL


def test_a_remote_error_raises_with_its_type_and_message_after_the_items_before_it(
    page: Any, page_origin: str, typed_chain: Any
) -> None:
    _client(page, page_origin)
    got = page.evaluate(
        """async ([url, key]) => {
          const { stream, ChainError } = await import(url + "/client.js");
          const parts = [];
          try {
            const answer = stream(url, { count: 5, fail_at: 2 }, { apiKey: key });
            for await (const part of answer) parts.push(part.index);
            return { parts };
          } catch (e) {
            return { parts, isChainError: e instanceof ChainError, type: e.type, message: e.remoteMessage };
          }
        }""",
        [typed_chain.entrypoint_url, API_KEY],
    )
    assert got == {
        "parts": [0, 1],
        "isChainError": True,
        "type": "ValueError",
        "message": "asked to fail at part 2",
    }


def test_an_abort_signal_stops_the_stream_and_the_chain(
    page: Any, page_origin: str, typed_chain: Any
) -> None:
    url = typed_chain.entrypoint_url
    headers = {"authorization": f"Bearer {API_KEY}"}
    before = metric(httpx.get(f"{url}/metrics", headers=headers).text, "chains_streams_cancelled_total")
    _client(page, page_origin)
    got = page.evaluate(
        """async ([url, key]) => {
          const { stream } = await import(url + "/client.js");
          const controller = new AbortController();
          const parts = [];
          try {
            const options = { apiKey: key, signal: controller.signal };
            const answer = stream(url, { count: 400, delay: 0.05 }, options);
            for await (const part of answer) {
              parts.push(part.index);
              if (parts.length === 2) controller.abort();
            }
            return { parts, error: null };
          } catch (e) {
            return { parts, error: e.name };
          }
        }""",
        [url, API_KEY],
    )
    assert got == {"parts": [0, 1], "error": "AbortError"}

    def cancelled() -> float:
        return metric(httpx.get(f"{url}/metrics", headers=headers).text, "chains_streams_cancelled_total")

    wait_until(lambda: cancelled() == before + 1, 10, "the server to cancel the aborted stream")


def test_call_returns_a_unary_result_and_raises_a_refusal(
    page: Any, page_origin: str, hello_chain: Any
) -> None:
    _client(page, page_origin)
    got = page.evaluate(
        """async ([url]) => {
          const { call } = await import(url + "/client.js");
          const result = await call(url, { names: ["Ada", "Grace"] });
          try {
            await call(url, { names: "Ada" });
            return { result };
          } catch (e) {
            return { result, type: e.type, status: e.status, message: e.remoteMessage };
          }
        }""",
        [hello_chain.entrypoint_url],
    )
    assert got["result"] == ["Hello, Ada!", "Hello, Grace!"]
    assert got["type"] == "HTTPError" and got["status"] == 422
    assert "names" in got["message"] and "list" in got["message"]


# Opens a WebSocket and resolves with whether it opened, what came back for each message sent,
# and its close code; a socket the server refuses before the upgrade never opens.
TALK_ON_SOCKET = """
(url, messages) => new Promise((resolve) => {
  const socket = new WebSocket(url);
  const got = { opened: false, replies: [], code: null };
  socket.onopen = () => { got.opened = true; for (const m of messages) socket.send(m); };
  socket.onmessage = (e) => {
    got.replies.push(e.data);
    if (got.replies.length === messages.length) socket.close(1000);
  };
  socket.onclose = (e) => { got.code = e.code; resolve(got); };
})
"""


def _sockets(url: str) -> float:
    text = httpx.get(f"{url}/metrics", headers={"authorization": f"Bearer {API_KEY}"}, timeout=10).text
    return metric(text, "chains_websocket_messages_total", direction="in")


def test_a_page_opens_a_websocket_with_a_stream_ticket_never_the_key(
    page: Any, page_origin: str, realtime_chain: Any
) -> None:
    url = realtime_chain.entrypoint_url
    before = _sockets(url)
    _client(page, page_origin)
    got = page.evaluate(
        f"""async ([url, key]) => {{
          const client = await import(url + "/client.js");
          const talk = {TALK_ON_SOCKET};
          const plain = url.replace("http://", "ws://") + "/run_remote";
          const out = {{}};
          out.noTicket = await talk(plain, ["refused"]);
          out.keyAsTicket = await talk(plain + "?chains_ticket=" + key, ["refused"]);
          out.ticketUrl = await client.socketUrl(url, {{ apiKey: key }});
          out.withTicket = await talk(out.ticketUrl, ["hello", "page"]);
          const socket = await client.openSocket(url, {{ apiKey: key }});
          out.opened = await new Promise((resolve) => {{
            socket.onmessage = (e) => {{ socket.close(); resolve(e.data); }};
            socket.send("from openSocket");
          }});
          try {{
            await client.openSocket(url);
          }} catch (e) {{
            out.openWithoutKey = e.name;
          }}
          return out;
        }}""",
        [url, API_KEY],
    )
    for refused in ("noTicket", "keyAsTicket"):
        assert got[refused]["opened"] is False and got[refused]["replies"] == [], refused
    assert API_KEY not in got["ticketUrl"] and got["ticketUrl"].startswith("ws://")
    assert got["withTicket"] == {"opened": True, "replies": ["HELLO", "PAGE"], "code": 1000}
    assert got["opened"] == "FROM OPENSOCKET"
    assert got["openWithoutKey"] == "ChainError"
    assert _sockets(url) - before == 3  # the ticket's two messages and openSocket's one


def test_a_page_of_an_origin_not_allowed_cannot_open_a_websocket(
    page: Any, other_origin: str, realtime_chain: Any
) -> None:
    url = realtime_chain.entrypoint_url
    # A good ticket, which a page of this origin could not have read itself: the origin alone refuses it.
    answer = httpx.post(f"{url}/stream_ticket", headers={"authorization": f"Bearer {API_KEY}"}, timeout=10)
    ticketed = url.replace("http://", "ws://") + "/run_remote?chains_ticket=" + answer.json()["ticket"]
    before = _sockets(url)
    _client(page, other_origin)
    got = page.evaluate(f"([url]) => ({TALK_ON_SOCKET})(url, ['refused'])", [ticketed])
    assert got["opened"] is False and got["replies"] == []
    assert _sockets(url) == before
