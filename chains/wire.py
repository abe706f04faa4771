"""The JSON settings every value on the wire is encoded with: arguments, results, stream parts."""

from __future__ import annotations

from typing import Any, Final

import pydantic

__all__ = ["BINARY_CONTEXT", "WIRE_CONFIG", "wire_adapter"]

# JSON has no bytes: base64 keeps any byte value intact where UTF-8 would refuse some.
WIRE_CONFIG: Final = pydantic.ConfigDict(ser_json_bytes="base64", val_json_bytes="base64")

# The serialization context of binary (MessagePack) calls: a custom field type that can travel
# as raw bytes there (chains.pydantic_numpy's arrays) checks for it and skips its text form.
BINARY_CONTEXT: Final[dict[str, Any]] = {"chains.wire": "binary"}


def wire_adapter(tp: Any) -> pydantic.TypeAdapter[Any]:
    """A TypeAdapter for ``tp`` with the wire's JSON settings where the type allows them."""
    try:
        return pydantic.TypeAdapter(tp, config=WIRE_CONFIG)
    except pydantic.PydanticUserError:  # models and dataclasses carry their own config
        return pydantic.TypeAdapter(tp)
