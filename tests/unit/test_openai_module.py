"""chains.openai on its own: its models against the official package's types, its streams and errors."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
from openai.types import Completion as OpenAICompletion
from openai.types.chat import ChatCompletion as OpenAIChatCompletion
from openai.types.chat import ChatCompletionChunk as OpenAIChunk

from chains import openai as oai


async def _deltas(*texts: str, fail: bool = False) -> AsyncIterator[str]:
    for text in texts:
        yield text
    if fail:
        raise RuntimeError("the model fell over")


def test_unknown_fields_and_tool_calls_are_carried_through() -> None:
    body = {
        "model": "m",
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "weather?"}, {"type": "image_url", "x": 1}],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "sunny", "cache_hint": "x"},
        ],
        "tools": [{"type": "function", "function": {"name": "w", "parameters": {}}}],
        "reasoning_effort": "low",
    }
    request = oai.ChatCompletionRequest.model_validate(body)
    assert request.messages[0].text() == "weather?"
    assert (
        request.messages[1].tool_calls is not None and request.messages[1].tool_calls[0].function is not None
    )
    assert request.messages[1].tool_calls[0].function.name == "w"
    assert request.model_extra == {"reasoning_effort": "low"}
    again = json.loads(request.model_dump_json(exclude_none=True))
    assert again["reasoning_effort"] == "low" and again["messages"][2]["cache_hint"] == "x"
    assert again["messages"][0]["content"][1] == {"type": "image_url", "x": 1}


async def test_chat_events_are_openais_chunks_text_escaped_as_json() -> None:
    texts = ["a", ' "quoted"', " \\ back", " \n new", " ünï 😀"]
    events = [
        e.data async for e in oai.chat_events(_deltas(*texts), model="m", include_usage=True, prompt_tokens=3)
    ]
    assert events[-1] == "[DONE]"
    chunks = [OpenAIChunk.model_validate_json(data) for data in events[:-1]]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].delta.content for c in chunks[1:6]] == texts
    assert chunks[6].choices[0].finish_reason == "stop"
    assert chunks[7].choices == [] and chunks[7].usage is not None
    assert (
        chunks[7].usage.prompt_tokens,
        chunks[7].usage.completion_tokens,
        chunks[7].usage.total_tokens,
    ) == (3, 5, 8)
    assert len({c.id for c in chunks}) == 1


async def test_a_stream_failing_midway_ends_with_openais_error_event_and_no_done() -> None:
    events = [e.data async for e in oai.chat_events(_deltas("a", fail=True), model="m")]
    assert events[-1] != "[DONE]"
    error = json.loads(events[-1])["error"]
    assert error["type"] == "server_error" and "the model fell over" in error["message"]


async def test_collected_answers_are_openais_types() -> None:
    chat = await oai.chat_completion(_deltas("x", " y"), model="m", prompt_tokens=1)
    parsed = OpenAIChatCompletion.model_validate_json(chat.model_dump_json())
    assert parsed.choices[0].message.content == "x y" and parsed.usage is not None
    assert parsed.usage.total_tokens == 3
    legacy = await oai.completion(_deltas("p", "q"), model="m")
    assert OpenAICompletion.model_validate_json(legacy.model_dump_json()).choices[0].text == "pq"


@pytest.mark.parametrize(
    ("given", "status", "kind", "code"),
    [
        (401, 401, "invalid_request_error", "invalid_api_key"),
        (422, 400, "invalid_request_error", None),
        (503, 503, "server_error", None),
        (429, 429, "rate_limit_error", "rate_limit_exceeded"),
    ],
)
def test_error_body_uses_openais_status_and_type(
    given: int, status: int, kind: str, code: str | None
) -> None:
    sent, body = oai.error_body(given, "why")
    assert sent == status
    assert body == {"error": {"message": "why", "type": kind, "param": None, "code": code}}


def test_unsupported_parameters_are_refused_not_ignored() -> None:
    with pytest.raises(oai.OpenAIError) as info:
        oai.refuse_unsupported(oai.ChatCompletionRequest(model="m", messages=[], n=2))
    assert info.value.status == 400 and info.value.body["error"]["param"] == "n"
    oai.refuse_unsupported(oai.ChatCompletionRequest(model="m", messages=[], n=1))
    with pytest.raises(oai.OpenAIError, match="best_of"):
        oai.refuse_unsupported(oai.CompletionRequest(model="m", prompt="p", best_of=3))
