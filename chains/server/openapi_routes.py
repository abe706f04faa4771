"""The ``@chains.route`` endpoints of a chainlet in its OpenAPI document: one operation each."""

from __future__ import annotations

from typing import Any

import pydantic

from chains.endpoint import EndpointSpec
from chains.routes import ParamSource, RouteSpec
from chains.streaming import StreamKind
from chains.streaming.kinds import SSE_EVENTS
from chains.wire import JSON_MEDIA_TYPE, SSE_MEDIA_TYPE

__all__ = ["route_paths"]

_REF = "#/components/schemas/{model}"
_IN = {ParamSource.PATH: "path", ParamSource.QUERY: "query", ParamSource.HEADER: "header"}


def route_paths(
    routes: tuple[RouteSpec, ...], components: dict[str, Any], security: list[dict[str, list[str]]]
) -> dict[str, Any]:
    """The ``paths`` entries of ``routes``; the schemas they use go into ``components``."""
    paths: dict[str, Any] = {}
    for route in routes:
        operation: dict[str, Any] = {
            "operationId": route.name,
            "summary": route.endpoint.describe(),
            "security": security,
            "responses": _responses(route, components),
        }
        parameters = [
            {
                "name": p.key,
                "in": _IN[p.source],
                "required": p.required,
                "schema": _schema(
                    pydantic.TypeAdapter(p.annotation).json_schema(ref_template=_REF), components
                ),
            }
            for p in route.params
            if p.source is not ParamSource.BODY
        ]
        if parameters:
            operation["parameters"] = parameters
        body = route.body
        if body is not None:
            name = body.annotation.__name__
            components[name] = _schema(body.annotation.model_json_schema(ref_template=_REF), components)
            operation["requestBody"] = {
                "required": body.required,
                "content": {JSON_MEDIA_TYPE: {"schema": {"$ref": _REF.format(model=name)}}},
            }
        paths.setdefault(route.path, {})[route.http_method.lower()] = operation
    return paths


def _responses(route: RouteSpec, components: dict[str, Any]) -> dict[str, Any]:
    content: dict[str, Any] = {}
    endpoint = route.endpoint
    for part in (endpoint, route.stream):
        if part is None:
            continue
        content.update(_content(part, components))
    what = (
        "the result, or its stream" if route.either else ("a stream" if endpoint.is_stream else "the result")
    )
    return {
        "200": {"description": what, "content": content},
        "401": {"description": "missing or wrong credentials"},
        "422": {"description": "the request does not match the route's parameters"},
        "500": {"description": f"{route.name} raised"},
        "503": {"description": "not ready, over capacity or shutting down; retry after Retry-After"},
    }


def _content(endpoint: EndpointSpec, components: dict[str, Any]) -> dict[str, Any]:
    kind = endpoint.output_kind
    if not isinstance(kind, StreamKind):
        schema = endpoint.output_adapter.json_schema(mode="serialization", ref_template=_REF)
        return {JSON_MEDIA_TYPE: {"schema": _schema(schema, components)}}
    if kind is SSE_EVENTS:
        return {SSE_MEDIA_TYPE: {"schema": {"type": "string"}}}
    return {
        kind.raw_media_type: {"schema": {"type": "string"}},
        SSE_MEDIA_TYPE: {"schema": {"type": "string"}},
    }


def _schema(schema: dict[str, Any], components: dict[str, Any]) -> dict[str, Any]:
    components.update(schema.pop("$defs", {}))
    return schema
