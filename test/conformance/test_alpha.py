"""The messages format: the official anthropic SDK against {gateway}/alpha."""

from __future__ import annotations

import json

import anthropic
import pytest
from anthropic.types import (
    ErrorResponse,
    Message,
    MessageTokensCount,
    ModelInfo,
    RawMessageStreamEvent,
    TextBlock,
    ToolUseBlock,
)

import tooldefs
from gwtest import (
    ALPHA_MODEL,
    AlphaClients,
    Exchange,
    Fake,
    Gateway,
    Meter,
    RecordingTransport,
    Tokens,
    assert_typed,
    fake_input_tokens,
    fake_reply_text,
    unknown_fields,
    validate,
)

PATH = "/v1/messages"
PROMPT = "Hello there, gateway"


def tokens(msg: Message) -> Tokens:
    """The usage the SDK reports, as the gateway meters it: input_tokens
    exclude the cache; cache creation is a write, cache read a read."""
    u = msg.usage
    return Tokens(u.input_tokens, u.output_tokens, u.cache_creation_input_tokens or 0, u.cache_read_input_tokens or 0)


def meter_expect(meter: Meter, *msgs: Message) -> None:
    """The account's usage moved by exactly what the SDK reported."""
    meter.expect(ALPHA_MODEL, *(tokens(m) for m in msgs))


def check_stream_events(ex: Exchange) -> list[dict]:
    """Every event of the stream the SDK read validates against the SDK's
    event union; returns the events' data."""
    events = []
    for name, data in ex.sse_data():
        obj = json.loads(data)
        assert obj["type"] == name, f"event {name!r} carries data of type {obj['type']!r}"
        if name == "ping":
            assert obj == {"type": "ping"}
            continue
        validate(RawMessageStreamEvent, obj)
        events.append(obj)
    assert [e["type"] for e in events][:2] == ["message_start", "content_block_start"]
    assert [e["type"] for e in events][-3:] == ["content_block_stop", "message_delta", "message_stop"]
    return events


def test_create(alpha: AlphaClients, gw: Gateway, primary: Fake, recorder: RecordingTransport, meter: Meter) -> None:
    primary.control(format="messages", cache_read_tokens=40, cache_write_tokens=7)
    client = alpha()
    msg = client.messages.create(
        model=ALPHA_MODEL, max_tokens=256, messages=[{"role": "user", "content": PROMPT}]
    )
    ex = recorder.last()
    assert ex.status == 200
    assert_typed(msg, Message, ex.response_json())

    rec = primary.only_request("messages", PATH)
    assert rec["body"] == ex.body
    # anthropic 2.x sends the key as a bearer token; the vendor gets its own
    # credential, never the client's key.
    assert ex.headers.get("authorization") == f"Bearer {gw.key}" and "x-api-key" not in ex.headers
    assert not any(gw.key in v for vs in rec["headers"].values() for v in vs)
    assert msg._request_id and msg._request_id.startswith("req_")  # the vendor's request-id header
    assert msg.id.startswith("msg_") and msg.model == ALPHA_MODEL
    assert msg.role == "assistant" and msg.stop_reason == "end_turn"
    assert len(msg.content) == 1 and isinstance(msg.content[0], TextBlock)
    assert msg.content[0].text == fake_reply_text(PROMPT)
    assert msg.usage.input_tokens == fake_input_tokens(rec["body"])
    assert msg.usage.output_tokens == 12
    assert msg.usage.cache_read_input_tokens == 40
    assert msg.usage.cache_creation_input_tokens == 7
    meter_expect(meter, msg)


def test_stream_helper(alpha: AlphaClients, primary: Fake, recorder: RecordingTransport, meter: Meter) -> None:
    primary.control(format="messages", cache_read_tokens=16, cache_write_tokens=3)
    client = alpha()
    with client.messages.stream(
        model=ALPHA_MODEL, max_tokens=256, messages=[{"role": "user", "content": PROMPT}]
    ) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    ex = recorder.last()
    assert ex.status == 200
    assert ex.response_headers["content-type"].startswith("text/event-stream")
    events = check_stream_events(ex)

    rec = primary.only_request("messages", PATH)
    assert rec["body"] == ex.body
    assert json.loads(rec["body"])["stream"] is True
    want = fake_reply_text(PROMPT)
    assert len(pieces) == 12 and "".join(pieces) == want
    assert isinstance(final, Message) and final.stop_reason == "end_turn"
    assert [b.type for b in final.content] == ["text"] and final.content[0].text == want
    assert final.usage.input_tokens == fake_input_tokens(rec["body"])
    assert final.usage.output_tokens == 12 == events[-2]["usage"]["output_tokens"]
    assert final.usage.cache_read_input_tokens == 16
    assert final.usage.cache_creation_input_tokens == 3
    meter_expect(meter, final)


def test_max_tokens_cuts_reply(alpha: AlphaClients, recorder: RecordingTransport, meter: Meter) -> None:
    msg = alpha().messages.create(model=ALPHA_MODEL, max_tokens=3, messages=[{"role": "user", "content": PROMPT}])
    assert_typed(msg, Message, recorder.last().response_json())
    assert msg.stop_reason == "max_tokens" and msg.usage.output_tokens == 3
    assert msg.content[0].text == fake_reply_text(PROMPT, 3)
    meter_expect(meter, msg)


def test_system_prompt_reaches_vendor(
    alpha: AlphaClients, primary: Fake, recorder: RecordingTransport, meter: Meter
) -> None:
    system = "You are terse. Antworte auf Deutsch. 絵文字なし。"
    client = alpha()
    msg = client.messages.create(
        model=ALPHA_MODEL,
        max_tokens=64,
        system=system,
        messages=[{"role": "user", "content": "Wie spät ist es?"}],
    )
    rec = primary.only_request("messages", PATH)
    assert rec["body"] == recorder.last().body
    assert json.loads(rec["body"])["system"] == system
    # The block form too.
    blocks = [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}]
    msg2 = client.messages.create(
        model=ALPHA_MODEL, max_tokens=64, system=blocks, messages=[{"role": "user", "content": "Wie spät ist es?"}]
    )
    recs = primary.requests("messages", PATH)
    assert len(recs) == 2 and recs[1]["body"] == recorder.last().body
    assert json.loads(recs[1]["body"])["system"] == blocks
    meter_expect(meter, msg, msg2)


def test_tools_reach_vendor_byte_identical(
    alpha: AlphaClients, primary: Fake, recorder: RecordingTransport, meter: Meter
) -> None:
    primary.control(format="messages", tool_call=True)
    client = alpha()
    tools = tooldefs.alpha_tools()
    msg = client.messages.create(
        model=ALPHA_MODEL,
        max_tokens=1024,
        tools=tools,
        tool_choice={"type": "auto"},
        messages=[{"role": "user", "content": "Book «Café ☕ with Zoë» tomorrow 9:00 in Zürich."}],
    )
    ex = recorder.last()
    assert len(ex.body) > 10_000
    rec = primary.only_request("messages", PATH)
    assert rec["body"] == ex.body, "the vendor received a different body than the SDK sent"
    assert json.loads(rec["body"])["tools"] == tools

    assert_typed(msg, Message, ex.response_json())
    assert msg.stop_reason == "tool_use"
    assert len(msg.content) == 1 and isinstance(msg.content[0], ToolUseBlock)
    call = msg.content[0]
    assert call.name == "create_calendar_event" and call.id.startswith("toolu_")
    assert call.input == tooldefs.FIRST_TOOL_ARGUMENTS
    meter_expect(meter, msg)

    # The client runs the tool and sends the result back; the fake answers
    # in text, as a model does after a tool result.
    follow = client.messages.create(
        model=ALPHA_MODEL,
        max_tokens=1024,
        tools=tools,
        messages=[
            {"role": "user", "content": "Book «Café ☕ with Zoë» tomorrow 9:00 in Zürich."},
            {"role": "assistant", "content": [c.to_dict() for c in msg.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "booked ✓"}]},
        ],
    )
    assert recorder.last().body == primary.requests("messages", PATH)[-1]["body"]
    assert_typed(follow, Message, recorder.last().response_json())
    assert follow.stop_reason == "end_turn" and follow.content[0].text == fake_reply_text("booked ✓")
    meter_expect(meter, follow)


def test_tools_streaming(alpha: AlphaClients, primary: Fake, recorder: RecordingTransport, meter: Meter) -> None:
    primary.control(format="messages", tool_call=True)
    client = alpha()
    partial = []
    with client.messages.stream(
        model=ALPHA_MODEL,
        max_tokens=1024,
        tools=tooldefs.alpha_tools(),
        messages=[{"role": "user", "content": "Weather in 東京?"}],
    ) as stream:
        for event in stream:
            if event.type == "input_json":
                partial.append(event.partial_json)
        final = stream.get_final_message()
    ex = recorder.last()
    check_stream_events(ex)
    rec = primary.only_request("messages", PATH)
    assert rec["body"] == ex.body
    assert final.stop_reason == "tool_use"
    assert len(final.content) == 1 and isinstance(final.content[0], ToolUseBlock)
    assert final.content[0].name == "create_calendar_event"
    assert final.content[0].input == tooldefs.FIRST_TOOL_ARGUMENTS
    assert json.loads("".join(partial)) == tooldefs.FIRST_TOOL_ARGUMENTS
    assert final.usage.output_tokens == len(partial)
    meter_expect(meter, final)


# --- errors -----------------------------------------------------------------


def check_error(err: anthropic.APIStatusError, status: int, typ: str) -> None:
    """The error is the vendor's: its status, JSON content type and an
    error body the SDK's ErrorResponse type validates, with the type the
    vendor documents for the status."""
    assert err.status_code == status
    assert err.response.headers["content-type"].startswith("application/json")
    validate(ErrorResponse, err.body)
    assert err.type == typ, err.body
    assert err.api_message


def test_bad_key_is_authentication_error(alpha: AlphaClients, primary: Fake, meter: Meter) -> None:
    client = alpha(key="cr_" + "0" * 40, max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as e:
        client.messages.create(model=ALPHA_MODEL, max_tokens=16, messages=[{"role": "user", "content": PROMPT}])
    check_error(e.value, 401, "authentication_error")
    assert primary.requests("messages", PATH) == []
    meter.expect_nothing()


def test_readonly_token_is_permission_denied(alpha: AlphaClients, gw: Gateway, primary: Fake, meter: Meter) -> None:
    client = alpha(key=gw.readonly, max_retries=0)
    with pytest.raises(anthropic.PermissionDeniedError) as e:
        client.messages.create(model=ALPHA_MODEL, max_tokens=16, messages=[{"role": "user", "content": PROMPT}])
    check_error(e.value, 403, "permission_error")
    assert primary.requests("messages", PATH) == []
    meter.expect_nothing()


def test_no_balance_is_402(alpha: AlphaClients, gw: Gateway, primary: Fake) -> None:
    client = alpha(key=gw.poor_key, max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as e:
        client.messages.create(model=ALPHA_MODEL, max_tokens=16, messages=[{"role": "user", "content": PROMPT}])
    # anthropic 2.x has a class of its own for 402.
    assert isinstance(e.value, anthropic.PaymentRequiredError)
    check_error(e.value, 402, "billing_error")
    assert primary.requests("messages", PATH) == []


def test_rate_limit_is_rate_limit_error(alpha: AlphaClients, gw: Gateway, primary: Fake) -> None:
    meter = Meter(gw, gw.limited_alpha_readonly)
    try:
        client = alpha(key=gw.limited_alpha_key, max_retries=0)
        msg = client.messages.create(model=ALPHA_MODEL, max_tokens=16, messages=[{"role": "user", "content": PROMPT}])
        meter_expect(meter, msg)
        with pytest.raises(anthropic.RateLimitError) as e:
            client.messages.create(model=ALPHA_MODEL, max_tokens=16, messages=[{"role": "user", "content": PROMPT}])
        check_error(e.value, 429, "rate_limit_error")
        assert len(primary.requests("messages", PATH)) == 1
        meter.expect_nothing()
    finally:
        meter.close()


def test_sdk_retry_honours_retry_after(
    alpha: AlphaClients, primary: Fake, recorder: RecordingTransport, meter: Meter
) -> None:
    primary.control(format="messages", status=429, status_count=1, retry_after="1")
    client = alpha()  # the SDK's default retries
    msg = client.messages.create(model=ALPHA_MODEL, max_tokens=64, messages=[{"role": "user", "content": PROMPT}])
    assert msg.content[0].text == fake_reply_text(PROMPT)

    first, second = recorder.exchanges
    assert first.status == 429 and first.response_headers.get("retry-after") == "1"
    assert validate(ErrorResponse, json.loads(bytes(first.response_body))).error.type == "rate_limit_error"
    assert second.status == 200 and second.headers.get("x-stainless-retry-count") == "1"
    # Without retry-after the SDK's first backoff is at most 0.5 s.
    assert second.sent_at - first.sent_at >= 0.9
    assert second.body == first.body
    assert len(primary.requests("messages", PATH)) == 2
    meter_expect(meter, msg)  # charged once, for the reply


def test_unknown_model_is_bad_request(alpha: AlphaClients, primary: Fake, meter: Meter) -> None:
    client = alpha(max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(model="no-such-model", max_tokens=16, messages=[{"role": "user", "content": PROMPT}])
    check_error(e.value, 400, "invalid_request_error")
    assert primary.requests("messages", PATH) == []
    meter.expect_nothing()


def test_malformed_body_is_bad_request(alpha: AlphaClients, primary: Fake, meter: Meter) -> None:
    client = alpha(max_retries=0)
    # A field of the wrong type, slipped past the SDK's types.
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(
            model=ALPHA_MODEL,
            max_tokens=16,
            messages=[{"role": "user", "content": PROMPT}],
            extra_body={"max_tokens": "lots"},
        )
    check_error(e.value, 400, "invalid_request_error")
    # Not JSON at all, through the SDK's low-level client.
    with pytest.raises(anthropic.BadRequestError) as e:
        client.post(PATH, cast_to=Message, content=b'{"model": "' + ALPHA_MODEL.encode() + b'", "max_tokens": ')
    check_error(e.value, 400, "invalid_request_error")
    assert primary.requests("messages", PATH) == []
    meter.expect_nothing()


def test_unknown_path_is_not_found(alpha: AlphaClients, primary: Fake, meter: Meter) -> None:
    client = alpha(max_retries=0)
    with pytest.raises(anthropic.NotFoundError) as e:
        client.models.retrieve("no-such-model")
    check_error(e.value, 404, "not_found_error")
    with pytest.raises(anthropic.NotFoundError) as e:
        client.post("/v1/no/such/endpoint", cast_to=Message, body={"model": ALPHA_MODEL, "max_tokens": 16})
    check_error(e.value, 404, "not_found_error")
    with pytest.raises(anthropic.NotFoundError) as e:
        client.get("/v1/messages", cast_to=Message)  # a wrong method on a model path
    check_error(e.value, 404, "not_found_error")
    assert primary.requests("messages", "/v1/no/such/endpoint") == [] and primary.requests("messages", PATH) == []
    meter.expect_nothing()


def test_models_list(alpha: AlphaClients, recorder: RecordingTransport, meter: Meter) -> None:
    models = list(alpha().models.list())
    assert all(isinstance(m, ModelInfo) for m in models)
    assert ALPHA_MODEL in [m.id for m in models]
    for m in recorder.last().response_json()["data"]:
        validate(ModelInfo, m)
    assert unknown_fields(models) == []
    meter.expect_nothing()  # a free path


def test_count_tokens_is_free(alpha: AlphaClients, primary: Fake, recorder: RecordingTransport, meter: Meter) -> None:
    n = alpha().messages.count_tokens(model=ALPHA_MODEL, messages=[{"role": "user", "content": PROMPT}])
    assert_typed(n, MessageTokensCount, recorder.last().response_json())
    rec = primary.only_request("messages", PATH + "/count_tokens")
    assert rec["body"] == recorder.last().body
    assert n.input_tokens == fake_input_tokens(rec["body"])
    meter.expect_nothing()
