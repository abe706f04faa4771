"""The wire codec of unary calls, JSON and MessagePack (use_binary)."""

from __future__ import annotations

import datetime
import enum
import uuid

import msgpack
import pydantic
import pydantic_core
import pytest

import chains
from chains import codec
from chains.checks import chainlet_spec


class Color(enum.Enum):
    RED = "red"


class Record(pydantic.BaseModel):
    data: bytes
    when: datetime.datetime
    tags: set[str]
    color: Color


class Store(chains.ChainletBase):
    async def run_remote(self, record: Record, raw: bytes, key: uuid.UUID, json: int = 0) -> Record:
        return record


SPEC = chainlet_spec(Store).endpoint
RECORD = Record(data=b"text", when=datetime.datetime(2026, 1, 2, 3, 4), tags={"a", "b"}, color=Color.RED)


@pytest.mark.parametrize("binary", [False, True])
def test_arguments_and_results_round_trip(binary: bool) -> None:
    key = uuid.uuid4()
    body = codec.encode_args(SPEC, (RECORD, b"\xff\x00"), {"key": key, "json": 3}, binary=binary)
    assert codec.decode_args(SPEC, body, binary=binary) == {
        "record": RECORD,
        "raw": b"\xff\x00",
        "key": key,
        "json": 3,
    }
    result = codec.encode_result(SPEC, RECORD, binary=binary)
    assert codec.decode_result(SPEC, result, binary=binary) == RECORD


def test_binary_sends_bytes_as_they_are() -> None:
    payload = bytes(200_000)
    json_body = codec.encode_args(SPEC, (RECORD, payload, uuid.uuid4()), {})
    binary_body = codec.encode_args(SPEC, (RECORD, payload, uuid.uuid4()), {}, binary=True)
    assert len(binary_body) < len(payload) * 1.01 < len(json_body)  # base64 costs a third more
    assert msgpack.unpackb(binary_body)["raw"] == payload


def test_only_binary_carries_any_bytes_inside_a_users_model() -> None:
    # A model's bytes fields use its own JSON config, UTF-8 by default, which refuses b"\xff".
    record = RECORD.model_copy(update={"data": bytes(range(256))})
    with pytest.raises(pydantic_core.PydanticSerializationError, match="utf-8"):
        codec.encode_result(SPEC, record)
    assert codec.decode_result(SPEC, codec.encode_result(SPEC, record, binary=True), binary=True) == record


def test_malformed_binary_body_is_a_validation_error() -> None:
    with pytest.raises(pydantic.ValidationError, match="not MessagePack"):
        codec.decode_args(SPEC, b"\xc1", binary=True)
    with pytest.raises(pydantic.ValidationError, match="record"):
        codec.decode_args(SPEC, msgpack.packb({"raw": b"", "key": str(uuid.uuid4())}), binary=True)


def test_parameters_named_like_model_attributes_keep_their_names() -> None:
    body = codec.encode_args(SPEC, (RECORD, b"", uuid.uuid4()), {"json": 7})
    assert b'"json":7' in body


def test_wrong_arguments_name_the_endpoint() -> None:
    with pytest.raises(TypeError, match=r"Store.run_remote\(\): missing a required argument: 'raw'"):
        codec.encode_args(SPEC, (RECORD,), {})
