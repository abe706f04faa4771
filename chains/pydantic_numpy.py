"""numpy arrays as fields of pydantic models, across JSON and binary calls.

The field holds a :class:`NumpyArrayField`, whose ``.array`` is the array. In JSON an array
travels as ``{"data_b64", "shape", "dtype"}`` (the same form as Truss Chains', so the two
interoperate); over ``depends(..., use_binary=True)`` the bytes travel raw, a third smaller
and without the base64 step. numpy is imported on first use: install it with the chainlet
(``pip install 'chains-sdk[numpy]'`` or ``DockerImage(pip_requirements=["numpy"])``)::

    class Frame(pydantic.BaseModel):
        pixels: NumpyArrayField

    frame = Frame(pixels=np.zeros((2, 3), dtype=np.uint8))
    frame.pixels.array += 1
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any, ClassVar

import pydantic
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

if TYPE_CHECKING:
    from numpy.typing import NDArray

from chains.wire import BINARY_CONTEXT

__all__ = ["NumpyArrayField"]


class NumpyArrayField:
    """A numpy array as a pydantic field; ``.array`` is the array itself."""

    data_key: ClassVar[str] = "data_b64"
    raw_key: ClassVar[str] = "data"
    shape_key: ClassVar[str] = "shape"
    dtype_key: ClassVar[str] = "dtype"

    def __init__(self, array: NDArray[Any]) -> None:
        self.array = array

    def __repr__(self) -> str:
        return f"NumpyArrayField(shape={self.array.shape}, dtype={self.array.dtype}, data={self.array})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, NumpyArrayField):
            return NotImplemented
        return (
            self.array.shape == other.array.shape
            and self.array.dtype == other.array.dtype
            and bool((self.array == other.array).all())
        )

    __hash__ = None  # type: ignore[assignment]  # arrays are mutable

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source_type: Any, handler: pydantic.GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            cls._validate,
            serialization=core_schema.plain_serializer_function_ser_schema(cls._serialize, info_arg=True),
        )

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: pydantic.GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {
            "type": "object",
            "title": "NumpyArray",
            "properties": {
                cls.data_key: {"type": "string", "contentEncoding": "base64"},
                cls.shape_key: {"type": "array", "items": {"type": "integer", "minimum": 0}},
                cls.dtype_key: {"type": "string"},
            },
            "required": [cls.data_key, cls.shape_key, cls.dtype_key],
        }

    @classmethod
    def _validate(cls, value: Any) -> NumpyArrayField:
        import numpy as np

        if isinstance(value, cls):
            return value
        if isinstance(value, np.ndarray):
            return cls(value)
        if isinstance(value, dict) and {cls.shape_key, cls.dtype_key} <= value.keys():
            if isinstance(value.get(cls.raw_key), bytes):
                data = value[cls.raw_key]
            elif isinstance(value.get(cls.data_key), str):
                try:
                    data = base64.b64decode(value[cls.data_key], validate=True)
                except ValueError as exc:
                    raise ValueError(f"{cls.data_key} is not base64: {exc}") from None
            else:
                raise ValueError(f"a numpy array needs {cls.data_key} (base64 text) or {cls.raw_key} (bytes)")
            try:
                dtype = np.dtype(value[cls.dtype_key])
                if dtype.hasobject:
                    raise ValueError("arrays of Python objects cannot travel")
                return cls(np.frombuffer(data, dtype=dtype).reshape(value[cls.shape_key]).copy())
            except (TypeError, ValueError) as exc:
                raise ValueError(f"invalid numpy array (data, shape or dtype): {exc}") from None
        raise ValueError(
            f"expected a numpy array or an object with {cls.data_key}, {cls.shape_key} and "
            f"{cls.dtype_key}, got {type(value).__name__}"
        )

    @classmethod
    def _serialize(cls, field: NumpyArrayField, info: core_schema.SerializationInfo) -> Any:
        array = field.array
        if info.mode == "json":
            return {
                cls.data_key: base64.b64encode(array.tobytes()).decode("ascii"),
                cls.shape_key: list(array.shape),
                cls.dtype_key: array.dtype.str,
            }
        if info.context == BINARY_CONTEXT:
            return {
                cls.raw_key: array.tobytes(),
                cls.shape_key: list(array.shape),
                cls.dtype_key: array.dtype.str,
            }
        return array
