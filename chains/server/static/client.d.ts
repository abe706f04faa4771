// Types of the chains JavaScript client (client.js, served by every entrypoint at /client.js).

export interface CallOptions {
  /** The chain's API key, sent as `Authorization: Bearer KEY` (never in a URL). */
  apiKey?: string;
  /** Aborts the call (and a stream being read). */
  signal?: AbortSignal;
  /** More request headers, e.g. `x-chains-timeout`. */
  headers?: Record<string, string>;
}

/** The JSON of chains' ErrorDetail (the short form outside a deployed chain). */
export interface ErrorDetail {
  exc_type: string;
  exc_module: string;
  message: string;
  traceback?: string;
  chainlet?: string;
  request_id?: string;
  cause?: ErrorDetail | null;
}

export class ChainError extends Error {
  /** The remote exception's type (`ValueError`, `DeadlineExceeded`), or `HTTPError`. */
  readonly type: string;
  /** The remote exception's message. */
  readonly remoteMessage: string;
  /** The HTTP status of the answer (0 when there was none). */
  readonly status: number;
  readonly requestId: string;
  readonly detail: ErrorDetail | unknown;
}

/** An event of an `AsyncIterator[chains.SSE]` endpoint. */
export interface ServerSentEvent {
  event: string;
  data: string;
  id: string;
}

export class ChainStream<Item = unknown, Header = unknown, Footer = unknown> implements AsyncIterable<Item> {
  /** The stream's header, once the first item has arrived (undefined when not declared). */
  header: Header | undefined;
  /** The stream's footer, once iteration has ended (undefined when not declared). */
  footer: Footer | undefined;
  requestId: string;
  [Symbol.asyncIterator](): AsyncIterator<Item>;
}

/** Call a unary entrypoint; resolves to its result. */
export function call<Result = unknown>(
  url: string,
  args?: Record<string, unknown>,
  options?: CallOptions,
): Promise<Result>;

/** Call a streaming entrypoint: `for await (const item of stream(url, args)) ...`. */
export function stream<Item = unknown, Header = unknown, Footer = unknown>(
  url: string,
  args?: Record<string, unknown>,
  options?: CallOptions,
): ChainStream<Item, Header, Footer>;

/** The URL for `new EventSource(...)`; with an API key it carries a short-lived stream ticket. */
export function eventSourceUrl(
  url: string,
  args?: Record<string, unknown>,
  options?: Pick<CallOptions, "apiKey" | "signal">,
): Promise<string>;

/** The URL for `new WebSocket(...)` to a WebSocket entrypoint; with an API key it carries a short-lived stream ticket. */
export function socketUrl(url: string, options?: Pick<CallOptions, "apiKey" | "signal">): Promise<string>;

/** An open WebSocket to a WebSocket entrypoint (a stream ticket is fetched first with an API key). */
export function openSocket(url: string, options?: Pick<CallOptions, "apiKey" | "signal">): Promise<WebSocket>;
