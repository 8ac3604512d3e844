"""The converter's rules: wire names, omitted optionals, strict scalars, protocol errors. No trio."""

from __future__ import annotations

from typing import Any

import cattrs
import pytest

from dsh_orchestra.protocol import (
    CONVERTER,
    SESSION_EVENT,
    AssistantMessage,
    ClientCapabilities,
    InitializeParams,
    InitializeResult,
    LlmRetry,
    PromptParams,
    SdkProtocolError,
    SessionEventParams,
    SessionQueryCompletedParams,
    SessionStatusParams,
    TextBlock,
    ToolCallBlock,
    TurnEnd,
    UnknownBlock,
    UnknownEvent,
    camel,
    make_converter,
    structure,
    unstructure,
)

STRICT = make_converter(forbid_extra_keys=True)


def event(kind: str, data: Any, **extra: Any) -> dict[str, Any]:
    return {"sessionId": "s1", "event": {"type": kind, "seq": 4, "time": 1796109493695, "data": data, **extra}}


def assistant(content: Any) -> dict[str, Any]:
    return event("assistant/message", {
        "turn": 1, "step": 1, "stream": [],
        "message": {"id": "m1", "role": "assistant", "content": content, "source": {"kind": "model"}},
    })


# ---- names and omission ---------------------------------------------------------------


def test_camel() -> None:
    assert camel("session_id") == "sessionId"
    assert camel("provider_retry_after_ms") == "providerRetryAfterMs"
    assert camel("cwd") == "cwd"


def test_snake_case_attributes_become_exact_wire_names() -> None:
    params = InitializeParams(
        cwd="/w", provider="deepseek-official", model="deepseek-v4-flash", reasoning_effort="max",
        max_tokens=100, approval_requests=True, capabilities=ClientCapabilities(user_questions=True),
    )
    assert unstructure(params) == {
        "cwd": "/w", "provider": "deepseek-official", "model": "deepseek-v4-flash", "reasoningEffort": "max",
        "maxTokens": 100, "approvalRequests": True, "capabilities": {"userQuestions": True},
    }


def test_an_omitted_optional_is_omitted_on_the_wire_never_null() -> None:
    assert unstructure(InitializeParams(cwd="/w", provider="p", model="m")) == {"cwd": "/w", "provider": "p", "model": "m"}
    assert unstructure(ClientCapabilities()) == {}
    assert unstructure(InitializeResult()) == {}


def test_false_and_zero_are_sent() -> None:
    """Only the default (None) is omitted; a falsy value the caller set is not."""
    raw = unstructure(InitializeParams(cwd="", provider="p", model="m", max_tokens=0, approval_requests=False))
    assert raw == {"cwd": "", "provider": "p", "model": "m", "maxTokens": 0, "approvalRequests": False}


def test_a_required_nullable_is_sent_as_null() -> None:
    params = SessionQueryCompletedParams(session_id="s", command_id="c", final_response="", finish_reason=None)
    assert unstructure(params) == {"sessionId": "s", "commandId": "c", "finalResponse": "", "finishReason": None}
    assert structure(unstructure(params), SessionQueryCompletedParams, method="session.query.completed") == params
    with pytest.raises(SdkProtocolError, match=r"required field missing @ params\.finishReason"):
        structure({"sessionId": "s", "commandId": "c", "finalResponse": ""}, SessionQueryCompletedParams,
                  method="session.query.completed")


def test_a_content_block_always_carries_its_type() -> None:
    assert unstructure(TextBlock(text="hi")) == {"type": "text", "text": "hi"}
    assert unstructure(PromptParams(session_id="s", content_blocks=[TextBlock(text="x")])) == {
        "sessionId": "s", "contentBlocks": [{"type": "text", "text": "x"}],
    }


# ---- strict scalars -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"sessionId": 1, "status": "idle"}, r"expected str, not int 1 @ params\.sessionId"),
        ({"sessionId": True, "status": "idle"}, r"expected str, not bool True @ params\.sessionId"),
        ({"sessionId": None, "status": "idle"}, r"expected str, not NoneType None @ params\.sessionId"),
        ({"sessionId": "s", "status": "busy"}, r"expected one of 'running', 'idle' @ params\.status"),
        ({"status": "idle"}, r"required field missing @ params\.sessionId"),
    ],
)
def test_scalars_are_strict(raw: dict[str, Any], message: str) -> None:
    """No silent 1 -> "1"; bool is not int; null is not a string."""
    with pytest.raises(SdkProtocolError, match=message) as info:
        structure(raw, SessionStatusParams, method="session.status")
    assert info.value.method == "session.status"


def test_bool_is_not_int_and_a_numeric_string_is_not_int() -> None:
    base = event("turn/start", {"turn": 1})
    with pytest.raises(SdkProtocolError, match=r"expected int, not bool True @ params\.event\.seq"):
        structure({**base, "event": {**base["event"], "seq": True}}, SessionEventParams, method=SESSION_EVENT)
    with pytest.raises(SdkProtocolError, match=r"expected int, not str '4' @ params\.event\.seq"):
        structure({**base, "event": {**base["event"], "seq": "4"}}, SessionEventParams, method=SESSION_EVENT)
    with pytest.raises(SdkProtocolError, match=r"expected int, not float 1\.5 @ params\.event\.data\.turn"):
        structure(event("turn/start", {"turn": 1.5}), SessionEventParams, method=SESSION_EVENT)


def test_int_is_not_bool() -> None:
    with pytest.raises(SdkProtocolError, match=r"expected bool, not int 1 @ params\.capabilities\.userQuestions"):
        structure({"cwd": "/", "provider": "p", "model": "m", "capabilities": {"userQuestions": 1}},
                  InitializeParams, method="initialize")


def test_a_float_field_takes_ints_and_floats_but_not_bools() -> None:
    retry = {"retryId": "r", "turn": 1, "step": 1, "retry": 1}
    parsed = structure(event("llm/retry", {**retry, "delayMs": 539.41}), SessionEventParams, method=SESSION_EVENT)
    assert isinstance(parsed.event, LlmRetry) and parsed.event.data.delay_ms == 539.41
    parsed = structure(event("llm/retry", {**retry, "delayMs": 500}), SessionEventParams, method=SESSION_EVENT)
    assert isinstance(parsed.event, LlmRetry) and parsed.event.data.delay_ms == 500.0
    with pytest.raises(SdkProtocolError, match=r"expected a number, not bool True @ params\.event\.data\.delayMs"):
        structure(event("llm/retry", {**retry, "delayMs": True}), SessionEventParams, method=SESSION_EVENT)


# ---- inbound data that breaks the protocol names the method and the JSON path ----------


@pytest.mark.parametrize(
    ("raw", "path", "message"),
    [
        ({"sessionId": "s1", "event": 5}, "params.event", "a session event must be an object, not int"),
        ({"sessionId": "s1", "event": ["x"]}, "params.event", "a session event must be an object, not list"),
        ({"sessionId": "s1", "event": {"seq": 1, "time": 2}}, "params.event", "a session event needs a string 'type'"),
        (assistant("hello"), "params.event.data.message.content", "expected a list, not str"),
        (assistant({"type": "text"}), "params.event.data.message.content", "expected a list, not dict"),
        (assistant([{"type": "text", "text": 1}]), "params.event.data.message.content[0].text", "expected str"),
        (assistant([{"type": "text", "text": "a"}, 7]), "params.event.data.message.content[1]",
         "a content block must be an object"),
        (assistant([{"text": "a"}]), "params.event.data.message.content[0]", "a content block needs a string 'type'"),
        (event("turn/end", {"turn": 1, "reason": {}}), "params.event.data.reason.kind", "required field missing"),
        (event("turn/end", {"turn": 1, "reason": {"kind": 3}}), "params.event.data.reason.kind", "expected str, not int 3"),
        (event("turn/end", {"turn": 1, "reason": {"kind": None}}), "params.event.data.reason.kind", "expected str"),
        (event("turn/end", {"turn": 1, "reason": "completed"}), "params.event.data.reason",
         "expected an object, not str"),
        (event("turn/end", {"turn": 1}), "params.event.data.reason", "required field missing"),
        (event("turn/end", ["x"]), "params.event.data", "expected an object, not list"),
    ],
)
def test_protocol_errors_name_method_and_path(raw: Any, path: str, message: str) -> None:
    with pytest.raises(SdkProtocolError) as info:
        structure(raw, SessionEventParams, method=SESSION_EVENT)
    error = info.value
    assert error.method == SESSION_EVENT
    assert error.path == path
    assert message in str(error)
    assert f"'{SESSION_EVENT}'" in str(error) and f"@ {path}" in str(error)


@pytest.mark.parametrize("raw", [[], "x", 3, None])
def test_params_that_are_not_an_object(raw: Any) -> None:
    with pytest.raises(SdkProtocolError, match=r"params of 'session\.status' must be an object") as info:
        structure(raw, SessionStatusParams, method="session.status")
    assert info.value.path == "params" and info.value.method == "session.status"


def test_a_result_that_does_not_fit_names_the_result() -> None:
    with pytest.raises(SdkProtocolError, match=r"invalid result for 'initialize'.*@ result\.serverInfo\.name") as info:
        structure({"serverInfo": {"name": 5}}, InitializeResult, method="initialize", what="result")
    assert info.value.path == "result.serverInfo.name"


def test_every_problem_is_listed() -> None:
    with pytest.raises(SdkProtocolError) as info:
        structure({"sessionId": 1, "status": 2}, SessionStatusParams, method="session.status")
    assert "params.sessionId" in str(info.value) and "params.status" in str(info.value)


# ---- openness: unknown types and keys --------------------------------------------------


def test_unknown_event_types_keep_their_raw_data() -> None:
    raw = event("todo/write", {"items": [1, 2]}, ignorable=True)
    parsed = structure(raw, SessionEventParams, method=SESSION_EVENT)
    assert parsed.event == UnknownEvent(type="todo/write", seq=4, time=1796109493695, data={"items": [1, 2]},
                                        ignorable=True)


def test_unknown_blocks_are_kept_whole() -> None:
    block = {"type": "file", "name": "a.txt", "extra": {"x": 1}}
    parsed = structure(assistant([block, {"type": "tool-call", "id": "c", "name": "read", "arguments": "{}"}]),
                       SessionEventParams, method=SESSION_EVENT)
    assert isinstance(parsed.event, AssistantMessage)
    content = parsed.event.data.message.content
    assert content == [UnknownBlock(type="file", raw=block), ToolCallBlock(id="c", name="read", arguments="{}")]
    assert unstructure(content[0]) == block


def test_unknown_keys_are_ignored_but_the_strict_twin_rejects_them() -> None:
    raw = event("turn/end", {"turn": 2, "reason": {"kind": "completed", "newField": 1}}, futureEnvelope="x")
    parsed = structure(raw, SessionEventParams, method=SESSION_EVENT)
    assert isinstance(parsed.event, TurnEnd) and parsed.event.data.reason.kind == "completed"
    with pytest.raises(cattrs.BaseValidationError) as info:
        STRICT.structure(raw, SessionEventParams)
    problems = " ".join(cattrs.transform_error(info.value))
    assert "futureEnvelope" in problems


def test_the_strict_twin_is_separate() -> None:
    assert STRICT is not CONVERTER
    assert CONVERTER.structure({"cwd": "/", "provider": "p", "model": "m", "x": 1}, InitializeParams) == InitializeParams(
        cwd="/", provider="p", model="m")
