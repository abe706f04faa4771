// The chains JavaScript client: call a chain's entrypoint from a web page.
// An ES module without dependencies, served by every entrypoint at /client.js:
//
//   import { call, stream } from "https://chain.example/client.js";
//   for await (const token of stream("https://chain.example", { prompt: "hi" })) {
//     output.textContent += token;
//   }
//
// Calls go over fetch, so they can POST and send the API key in a header; streams use the
// server-sent events form of the entrypoint's answer. The page's origin must be allowed by
// the chain (chains push --cors-origin ORIGIN) unless the chain served the page itself.

const RUN = "/run_remote";
const ACCEPT_EVENTS = "text/event-stream";

/** An error the chain (or the HTTP exchange with it) reported. */
export class ChainError extends Error {
  constructor(type, message, { status = 0, requestId = "", detail = null } = {}) {
    super(`${type}: ${message}`);
    this.name = "ChainError";
    this.type = type;
    this.remoteMessage = message;
    this.status = status;
    this.requestId = requestId;
    this.detail = detail;
  }
}

function endpoint(url) {
  const base = String(url).replace(/\/+$/, "");
  return base.endsWith(RUN) ? base : base + RUN;
}

function requestHeaders(apiKey, headers, accept) {
  const out = { "content-type": "application/json", accept, ...(headers || {}) };
  if (apiKey) out.authorization = `Bearer ${apiKey}`;
  return out;
}

function fromDetail(detail, status, requestId) {
  return new ChainError(detail.exc_type || "Error", detail.message || "", {
    status,
    requestId: detail.request_id || requestId,
    detail,
  });
}

async function failure(response) {
  const requestId = response.headers.get("x-chains-request-id") || "";
  let body = null;
  try {
    body = await response.json();
  } catch {
    // not JSON: reported by status below
  }
  if (body && body.error) return fromDetail(body.error, response.status, requestId);
  let message = response.statusText || `HTTP ${response.status}`;
  if (body && body.detail !== undefined) {
    message = typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail);
  }
  return new ChainError("HTTPError", message, { status: response.status, requestId, detail: body });
}

async function post(url, args, { apiKey, signal, headers } = {}, accept) {
  const response = await fetch(endpoint(url), {
    method: "POST",
    headers: requestHeaders(apiKey, headers, accept),
    body: JSON.stringify(args || {}),
    signal,
  });
  if (!response.ok) throw await failure(response);
  return response;
}

/**
 * Call a unary entrypoint; resolves to its result (parsed JSON).
 * Rejects with a ChainError carrying the remote exception's type and message.
 */
export async function call(url, args = {}, options = {}) {
  const response = await post(url, args, options, "application/json");
  return response.json();
}

// Server-sent events from a byte stream, by the event-stream rules (CR, LF or CRLF line ends,
// comments, multi-line data). Yields {event, data, id}.
async function* events(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let data = [];
  let event = "";
  let id = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let match;
      while ((match = /\r\n|\r|\n/.exec(buffer)) !== null) {
        if (match[0] === "\r" && match.index === buffer.length - 1) break; // maybe CRLF split
        const line = buffer.slice(0, match.index);
        buffer = buffer.slice(match.index + match[0].length);
        if (line === "") {
          if (data.length) yield { event: event || "message", data: data.join("\n"), id };
          data = [];
          event = "";
          continue;
        }
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let text = colon < 0 ? "" : line.slice(colon + 1);
        if (text.startsWith(" ")) text = text.slice(1);
        if (field === "data") data.push(text);
        else if (field === "event") event = text;
        else if (field === "id" && !text.includes("\0")) id = text;
      }
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

function base64Bytes(text) {
  const raw = atob(text);
  const out = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) out[i] = raw.charCodeAt(i);
  return out;
}

function itemOf(kind, message) {
  switch (kind) {
    case "text":
      return message.data;
    case "bytes":
      return base64Bytes(message.data);
    case "sse":
      return { event: message.event, data: message.data, id: message.id };
    default:
      return JSON.parse(message.data); // items and structured streams: one JSON value each
  }
}

/**
 * A streaming call: iterate it with for await. Items are strings (text streams), Uint8Array
 * (bytes), objects (typed items), or {event, data, id} (SSE streams). A declared header is
 * in `header` once the first item arrives, a footer in `footer` once the loop ends.
 */
export class ChainStream {
  constructor(url, args, options) {
    this.url = url;
    this.args = args;
    this.options = options || {};
    this.header = undefined;
    this.footer = undefined;
    this.requestId = "";
  }

  async *[Symbol.asyncIterator]() {
    const response = await post(this.url, this.args, this.options, ACCEPT_EVENTS);
    this.requestId = response.headers.get("x-chains-request-id") || "";
    const kind = response.headers.get("x-chains-stream") || "items";
    for await (const message of events(response.body)) {
      switch (message.event) {
        case "header":
          this.header = JSON.parse(message.data);
          break;
        case "footer":
          this.footer = JSON.parse(message.data);
          break;
        case "error":
          throw fromDetail(JSON.parse(message.data), response.status, this.requestId);
        case "end":
          return;
        default:
          yield itemOf(kind, message);
      }
    }
    throw new ChainError("StreamInterrupted", "the stream was cut before its end event", {
      status: response.status,
      requestId: this.requestId,
    });
  }
}

/** Call a streaming entrypoint; see ChainStream. */
export function stream(url, args = {}, options = {}) {
  return new ChainStream(url, args, options);
}

/**
 * The URL an EventSource opens for a streaming call. Simple arguments go as they are,
 * lists, objects and null as JSON. With an API key, a short-lived stream ticket is fetched
 * first (POST /stream_ticket): the key itself never goes into a URL.
 */
export async function eventSourceUrl(url, args = {}, { apiKey, signal } = {}) {
  const target = new URL(endpoint(url));
  for (const [name, value] of Object.entries(args || {})) {
    const plain = typeof value === "string" || typeof value === "number" || typeof value === "boolean";
    target.searchParams.set(name, plain ? String(value) : JSON.stringify(value));
  }
  if (apiKey) target.searchParams.set("chains_ticket", await streamTicket(url, apiKey, signal));
  return target.toString();
}

async function streamTicket(url, apiKey, signal) {
  const response = await fetch(endpoint(url).slice(0, -RUN.length) + "/stream_ticket", {
    method: "POST",
    headers: { authorization: `Bearer ${apiKey}` },
    signal,
  });
  if (!response.ok) throw await failure(response);
  return (await response.json()).ticket;
}

/**
 * The URL a WebSocket opens for a WebSocket entrypoint (ws: or wss: after the chain's
 * scheme). A page cannot set a WebSocket's headers, so with an API key a short-lived stream
 * ticket is fetched first and goes in the query: the key itself never goes into a URL.
 */
export async function socketUrl(url, { apiKey, signal } = {}) {
  const target = new URL(endpoint(url));
  target.protocol = target.protocol === "https:" ? "wss:" : "ws:";
  if (apiKey) target.searchParams.set("chains_ticket", await streamTicket(url, apiKey, signal));
  return target.toString();
}

/**
 * Open a conversation with a WebSocket entrypoint: resolves with the open WebSocket, or
 * rejects with a ChainError when it cannot be opened (a browser does not say why: a refusal
 * of the ticket, the origin or a full chainlet all look alike to the page).
 */
export async function openSocket(url, { apiKey, signal } = {}) {
  const socket = new WebSocket(await socketUrl(url, { apiKey, signal }));
  return await new Promise((resolve, reject) => {
    socket.addEventListener("open", () => resolve(socket), { once: true });
    socket.addEventListener(
      "close",
      (e) => reject(new ChainError("SocketRefused", `the WebSocket did not open (close code ${e.code})`)),
      { once: true },
    );
  });
}
