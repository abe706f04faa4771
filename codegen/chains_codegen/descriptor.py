"""``chainlet.json``: what a deploy target or a person needs to know about a generated chainlet.

>>> descriptor_text({"name": "Greeter", "code_version": "ab"})
'{\\n  "code_version": "ab",\\n  "name": "Greeter"\\n}\\n'
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from chains.model import Chain, ChainletSpec
from chains.streaming import shape_of
from chains_codegen.layout import GENERATOR_VERSION

__all__ = ["DESCRIPTOR", "chainlet_descriptor", "descriptor_text", "read_descriptor"]

DESCRIPTOR = "chainlet.json"


def chainlet_descriptor(
    chain: Chain, spec: ChainletSpec, *, code_version: str, module: str, chain_file: str
) -> dict[str, Any]:
    """The descriptor of ``spec`` as a JSON-ready dict.

    ``module`` is the name the server imports the chainlet's class from; ``chain_file``
    the chain file's path inside ``src/``.
    """
    endpoint = spec.endpoint
    has_item_schema = endpoint.output_kind.has_item_schema
    return {
        "name": spec.name,
        "chain": chain.name,
        "is_entrypoint": spec is chain.entrypoint,
        "source": {"chain_file": chain_file, "module": module, "class": spec.cls.__qualname__},
        "endpoint": {
            "signature": endpoint.describe(),
            "is_async": endpoint.is_async,
            "input_schema": endpoint.input_model.model_json_schema(by_alias=True),
            "output_kind": endpoint.output_kind.name,
            "output_schema": (
                endpoint.output_adapter.json_schema(mode="serialization", by_alias=True)
                if has_item_schema
                else None
            ),
            "stream_fingerprint": shape_of(endpoint).fingerprint if endpoint.is_stream else None,
            # @chains.batched: calls are gathered into batches inside the chainlet's server.
            "batching": dataclasses.asdict(endpoint.batching) if endpoint.batching is not None else None,
        },
        "dependencies": [
            {
                "param": dep.param,
                "chainlet": dep.name,
                "retries": dep.marker.retries,
                "timeout_sec": dep.marker.timeout_sec,
                "concurrency_limit": dep.marker.concurrency_limit,
                "use_binary": dep.marker.use_binary,
            }
            for dep in spec.dependencies
        ],
        "options": spec.remote_config.model_dump(mode="json"),
        "code_version": code_version,
        "generator_version": GENERATOR_VERSION,
    }


def descriptor_text(descriptor: dict[str, Any]) -> str:
    """The file's text: sorted keys, two-space indent, a final newline."""
    return json.dumps(descriptor, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def read_descriptor(text: str) -> dict[str, Any] | None:
    """A descriptor read back, or None when ``text`` is not one this generator wrote."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or "generator_version" not in data or "code_version" not in data:
        return None
    return data
