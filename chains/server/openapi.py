"""The OpenAPI document of a chainlet's endpoint, and the entrypoint's ``/docs`` page."""

from __future__ import annotations

import html
import json
from typing import Any

from chains.endpoint import EndpointSpec
from chains.model import ChainletSpec
from chains.routes import routes_of
from chains.server.openapi_routes import route_paths
from chains.streaming import StreamKind
from chains.wire import FRAMED_MEDIA_TYPE, HEALTHZ, JSON_MEDIA_TYPE, READYZ, RUN_REMOTE, SSE_MEDIA_TYPE

__all__ = ["docs_page", "document", "example_arguments"]

_REF = "#/components/schemas/{model}"


def _hoist(schema: dict[str, Any], components: dict[str, Any]) -> dict[str, Any]:
    components.update(schema.pop("$defs", {}))
    return schema


def document(spec: ChainletSpec, *, entrypoint: bool) -> dict[str, Any]:
    """An OpenAPI 3.1 document describing ``POST /run_remote`` (a ``GET`` with an upgrade, for
    a WebSocket endpoint) and the health routes."""
    endpoint = spec.endpoint
    components: dict[str, Any] = {}
    request = _hoist(endpoint.input_model.model_json_schema(by_alias=True, ref_template=_REF), components)
    components[endpoint.input_model.__name__] = request
    responses: dict[str, Any] = {
        "401": {"description": "missing or wrong credentials"},
        "413": {"description": "request body over the size limit"},
        "415": {"description": "the body is not application/json"},
        "422": {"description": "the arguments do not match the endpoint's parameters"},
        "500": {"description": "run_remote raised; the body carries the error detail"},
        "503": {"description": "over capacity or shutting down; retry after Retry-After"},
        "504": {"description": "the caller's deadline passed"},
    }
    kind = endpoint.output_kind
    if isinstance(kind, StreamKind):
        content = {
            FRAMED_MEDIA_TYPE: {"schema": {"type": "string", "format": "binary"}},
            SSE_MEDIA_TYPE: {"schema": {"type": "string"}},
            kind.raw_media_type: {"schema": _stream_item_schema(endpoint, components)},
        }
        responses["200"] = {
            "description": f"a {kind.name} stream, negotiated on Accept",
            "content": content,
        }
    else:
        output = _hoist(
            endpoint.output_adapter.json_schema(mode="serialization", ref_template=_REF), components
        )
        responses["200"] = {"description": "the result", "content": {JSON_MEDIA_TYPE: {"schema": output}}}
    security: list[dict[str, list[str]]] = [{"bearer": []}] if not entrypoint else [{"bearer": []}, {}]
    routes = route_paths(routes_of(spec.cls), components, security)  # @chains.route endpoints
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": f"chainlet {spec.name}", "version": "1", "description": endpoint.describe()},
        "paths": {
            RUN_REMOTE: {
                "post": {
                    "operationId": "run_remote",
                    "summary": endpoint.describe(),
                    "security": security,
                    "requestBody": {
                        "required": True,
                        "content": {
                            JSON_MEDIA_TYPE: {
                                "schema": {"$ref": _REF.format(model=endpoint.input_model.__name__)}
                            }
                        },
                    },
                    "responses": responses,
                }
            },
            HEALTHZ: {"get": {"operationId": "healthz", "responses": {"200": {"description": "alive"}}}},
            READYZ: {
                "get": {
                    "operationId": "readyz",
                    "responses": {"200": {"description": "ready"}, "503": {"description": "not ready"}},
                }
            },
            **routes,
        },
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
    if kind.is_socket:
        doc["paths"][RUN_REMOTE] = {"get": _websocket_operation(endpoint, security)}
        doc["components"]["schemas"] = {}
    return doc


def _websocket_operation(endpoint: EndpointSpec, security: list[dict[str, list[str]]]) -> dict[str, Any]:
    # OpenAPI has no words for a WebSocket: the upgrade is described as the GET it starts as,
    # and ``x-websocket`` marks it for the tools that know that convention.
    return {
        "operationId": "run_remote",
        "summary": endpoint.describe(),
        "description": (
            f"A WebSocket conversation: connect to ws://HOST{RUN_REMOTE} (wss:// over TLS); each "
            "message, text or bytes, goes to run_remote, which answers with messages of its own. "
            "A POST is refused with 426."
        ),
        "security": security,
        "x-websocket": True,
        "parameters": [
            {"name": "Upgrade", "in": "header", "required": True, "schema": {"const": "websocket"}},
            {"name": "Connection", "in": "header", "required": True, "schema": {"const": "Upgrade"}},
        ],
        "responses": {
            "101": {"description": "switching to the WebSocket protocol: the conversation begins"},
            "401": {"description": "missing or wrong credentials"},
            "403": {"description": "a web page of an origin the entrypoint does not allow"},
            "426": {"description": "not a WebSocket upgrade"},
            "503": {"description": "not ready, over capacity or shutting down; retry after Retry-After"},
        },
    }


def _stream_item_schema(endpoint: EndpointSpec, components: dict[str, Any]) -> dict[str, Any]:
    if endpoint.output_kind.has_item_schema:
        return _hoist(
            endpoint.output_adapter.json_schema(mode="serialization", ref_template=_REF), components
        )
    return {"type": "string"}


def example_arguments(endpoint: EndpointSpec) -> dict[str, Any]:
    """Plausible arguments for a first call: a value of each required parameter's type."""
    schema = endpoint.input_model.model_json_schema(by_alias=True)
    defs = schema.get("$defs", {})
    return {
        name: _example(schema["properties"].get(name, {}), defs, 0) for name in schema.get("required", [])
    }


def _example(schema: dict[str, Any], defs: dict[str, Any], depth: int) -> Any:
    if depth > 8:
        return None
    if "$ref" in schema:
        return _example(defs.get(schema["$ref"].rsplit("/", 1)[-1], {}), defs, depth + 1)
    if "default" in schema:
        return schema["default"]
    if "enum" in schema:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    for key in ("anyOf", "oneOf", "allOf"):
        if schema.get(key):
            return _example(schema[key][0], defs, depth + 1)
    kind = schema.get("type", "string")
    if kind == "array":
        return [_example(schema.get("items", {}), defs, depth + 1)]
    if kind == "object":
        properties = schema.get("properties", {})
        return {
            k: _example(properties[k], defs, depth + 1) for k in schema.get("required", []) if k in properties
        }
    return {"string": "hello", "integer": 1, "number": 1.0, "boolean": True, "null": None}.get(kind, "hello")


def docs_page(spec: ChainletSpec, served: list[tuple[str, str, str]] | None = None) -> str:
    """A self-contained page: every endpoint the chainlet serves, the signature and schema of
    ``run_remote``, and a form that streams a call.

    The list is the OpenAPI document's operations (``@chains.route`` routes among them), then
    ``served``: ``(method, path, summary)`` of routes the document leaves out (the async ones).

    >>> "GET /healthz" in docs_page(spec)
    True
    """
    endpoint = spec.endpoint
    title = html.escape(f"{spec.name}: {endpoint.describe()}")
    listed = _endpoint_list(spec, served or [])
    if endpoint.output_kind.is_socket:
        return _SOCKET_PAGE.format(title=title, endpoints=listed)
    schema = json.dumps(endpoint.input_model.model_json_schema(by_alias=True), indent=2)
    example = json.dumps(example_arguments(endpoint))
    escaped = {"schema": html.escape(schema), "example": html.escape(example)}
    return _PAGE.format(title=title, endpoints=listed, **escaped)


def _endpoint_list(spec: ChainletSpec, served: list[tuple[str, str, str]]) -> str:
    """The page's table of endpoints, one row per operation."""
    rows: list[tuple[str, str, str]] = []
    for path, operations in document(spec, entrypoint=True)["paths"].items():
        for method, operation in operations.items():
            summary = operation.get("summary") or operation.get("operationId", "")
            rows.append((method.upper(), path, str(summary)))
    rows += served
    cells = "".join(
        f'<tr data-route="{html.escape(f"{m} {p}")}"><td><code>{html.escape(m)} {html.escape(p)}</code></td>'
        f"<td>{html.escape(s)}</td></tr>"
        for m, p, s in rows
    )
    return f'<table id="endpoints"><tr><th>endpoint</th><th>what it does</th></tr>{cells}</table>'


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font: 15px/1.5 system-ui, sans-serif; max-width: 52rem; margin: 2rem auto; padding: 0 1rem; }}
td {{ padding: .2rem .8rem .2rem 0; vertical-align: top; }}
pre, textarea {{ font: 13px/1.4 ui-monospace, monospace; background: #f6f6f6; padding: .75rem; }}
textarea {{ width: 100%; box-sizing: border-box; }}
</style></head><body>
<h1>{title}</h1>
<h2>Endpoints</h2>
{endpoints}
<h2>run_remote</h2>
<p>POST a JSON object of the arguments to <code>/run_remote</code>.
Streams answer as text, NDJSON, server-sent events (<code>Accept: text/event-stream</code>)
or framed (<code>Accept: application/x-chains-stream</code>). The OpenAPI document is at
<a href="/openapi.json">/openapi.json</a>.</p>
<h2>Try it</h2>
<textarea id="args" rows="4">{example}</textarea>
<p><label>API key (if the chain has one) <input id="key" type="password"></label>
<button id="call">Call</button></p>
<pre id="out"></pre>
<h2>Arguments</h2>
<pre>{schema}</pre>
<script>
document.getElementById("call").onclick = async () => {{
  const out = document.getElementById("out");
  out.textContent = "";
  const headers = {{"content-type": "application/json"}};
  const key = document.getElementById("key").value;
  if (key) headers["authorization"] = "Bearer " + key;
  const body = document.getElementById("args").value;
  const response = await fetch("/run_remote", {{method: "POST", headers, body}});
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  for (;;) {{
    const {{value, done}} = await reader.read();
    if (done) break;
    out.textContent += value;
  }}
}};
</script>
</body></html>
"""


_SOCKET_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font: 15px/1.5 system-ui, sans-serif; max-width: 52rem; margin: 2rem auto; padding: 0 1rem; }}
</style></head><body>
<h1>{title}</h1>
<p>A WebSocket endpoint: open a WebSocket to <code>/run_remote</code> (<code>ws://</code>, or
<code>wss://</code> over TLS) and exchange messages, text or bytes; a POST gets 426. From a
terminal, <code>chains call</code> with the chain's name sends each line of its input as a
message and prints each answer. The OpenAPI document is at <a href="/openapi.json">/openapi.json</a>.</p>
<h2>Endpoints</h2>
{endpoints}
</body></html>
"""
