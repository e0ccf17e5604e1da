"""The chat-completions format: the official openai SDK against {gateway}/beta/v1."""

from __future__ import annotations

import json

import openai
import pytest
from openai.types import ErrorObject, Model
from openai.types.chat import ChatCompletion, ChatCompletionChunk

import tooldefs
from gwtest import (
    BETA_MODEL,
    FAKE_REPLY_WORDS,
    REASONING_MODEL,
    REASONING_TOKENS,
    BetaClients,
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
    vendor_chat_completions_client,
)

PATH = "/v1/chat/completions"
PROMPT = "Hello there, gateway"
MESSAGES = [{"role": "user", "content": PROMPT}]


def tokens(usage: openai.types.CompletionUsage | None) -> Tokens:
    """The usage the SDK reports, as the gateway meters it: input is
    prompt_tokens less cached_tokens, and cached tokens are cache reads."""
    assert usage is not None, "the SDK reports no usage"
    cached = (usage.prompt_tokens_details.cached_tokens if usage.prompt_tokens_details else 0) or 0
    return Tokens(usage.prompt_tokens - cached, usage.completion_tokens, cache_read=cached)


def meter_expect(meter: Meter, *usages: openai.types.CompletionUsage | None) -> None:
    """The account's usage moved by exactly what the SDK reported."""
    meter.expect(BETA_MODEL, *(tokens(u) for u in usages))


def stream_chunks(ex: Exchange) -> list[dict]:
    """Every chunk of the stream the SDK read validates against the SDK's
    chunk type; the stream ends with [DONE]. Returns the chunks."""
    sse = ex.sse_data()
    assert sse and sse[-1] == (None, "[DONE]")
    chunks = []
    for event, data in sse[:-1]:
        assert event is None
        obj = json.loads(data)
        validate(ChatCompletionChunk, obj)
        chunks.append(obj)
    return chunks


def check_usage_matches_fake(usage: openai.types.CompletionUsage, body: bytes, cached: int, completion: int) -> None:
    assert usage.prompt_tokens == fake_input_tokens(body) + cached
    assert usage.prompt_tokens_details is not None and usage.prompt_tokens_details.cached_tokens == cached
    assert usage.completion_tokens == completion
    assert usage.total_tokens == usage.prompt_tokens + completion


def test_create(beta: BetaClients, gw: Gateway, primary: Fake, recorder: RecordingTransport, meter: Meter) -> None:
    primary.control(format="chat_completions", cache_read_tokens=5)
    client = beta()
    c = client.chat.completions.create(model=BETA_MODEL, messages=MESSAGES, max_completion_tokens=256)
    ex = recorder.last()
    assert ex.status == 200
    assert_typed(c, ChatCompletion, ex.response_json())

    rec = primary.only_request("chat_completions", PATH)
    assert rec["body"] == ex.body
    assert ex.headers.get("authorization") == f"Bearer {gw.key}"
    assert not any(gw.key in v for vs in rec["headers"].values() for v in vs)
    assert c._request_id and c._request_id.startswith("req_")  # the vendor's x-request-id header
    assert c.object == "chat.completion" and c.model == BETA_MODEL and c.id.startswith("chatcmpl-")
    assert len(c.choices) == 1 and c.choices[0].finish_reason == "stop"
    assert c.choices[0].message.role == "assistant"
    assert c.choices[0].message.content == fake_reply_text(PROMPT)
    assert c.usage is not None
    check_usage_matches_fake(c.usage, rec["body"], cached=5, completion=12)
    meter_expect(meter, c.usage)


def test_stream_helper_with_usage(beta: BetaClients, primary: Fake, recorder: RecordingTransport, meter: Meter) -> None:
    primary.control(format="chat_completions", cache_read_tokens=3)
    client = beta()
    deltas = []
    with client.chat.completions.stream(
        model=BETA_MODEL, messages=MESSAGES, stream_options={"include_usage": True}
    ) as stream:
        for event in stream:
            if event.type == "content.delta" and event.delta:
                deltas.append(event.delta)
        final = stream.get_final_completion()
    ex = recorder.last()
    assert ex.response_headers["content-type"].startswith("text/event-stream")
    chunks = stream_chunks(ex)
    rec = primary.only_request("chat_completions", PATH)
    assert rec["body"] == ex.body
    sent = json.loads(rec["body"])
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}

    want = fake_reply_text(PROMPT)
    # The first chunk carries the role and "" as content, as the vendor's do.
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": "", "refusal": None}
    assert "".join(deltas) == want and len(deltas) == 12
    assert final.choices[0].message.content == want
    assert final.choices[0].finish_reason == "stop"
    # The usage chunk comes last, with no choices.
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] is not None
    assert all(ch["usage"] is None for ch in chunks[:-1])
    assert final.usage is not None
    check_usage_matches_fake(final.usage, rec["body"], cached=3, completion=12)
    meter_expect(meter, final.usage)


def test_stream_create_with_usage(beta: BetaClients, primary: Fake, recorder: RecordingTransport, meter: Meter) -> None:
    client = beta()
    text, usage, finish = [], None, None
    for chunk in client.chat.completions.create(
        model=BETA_MODEL, messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    ):
        assert isinstance(chunk, ChatCompletionChunk)
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.content:
                text.append(choice.delta.content)
            if choice.finish_reason:
                finish = choice.finish_reason
    stream_chunks(recorder.last())
    rec = primary.only_request("chat_completions", PATH)
    assert rec["body"] == recorder.last().body
    assert "".join(text) == fake_reply_text(PROMPT) and finish == "stop"
    assert usage is not None
    check_usage_matches_fake(usage, rec["body"], cached=0, completion=12)
    meter_expect(meter, usage)


def with_usage_option(body: bytes) -> bytes:
    """A body whose client did not ask for usage, as the gateway sends it on:
    stream_options added after the last member, every other byte as sent."""
    end = body.rstrip().rindex(b"}")
    last = len(body[:end].rstrip())
    return body[:last] + b',"stream_options":{"include_usage":true}' + body[last:]


def test_stream_without_usage(
    beta: BetaClients, primary: Fake, recorder: RecordingTransport, meter: Meter
) -> None:
    """Without include_usage the SDK shows no usage, as from the vendor; the
    gateway asked the vendor for it, and charges the vendor's figures."""
    client = beta()
    text, finish = [], None
    with client.chat.completions.stream(model=BETA_MODEL, messages=MESSAGES) as stream:
        for event in stream:
            if event.type == "content.delta":
                text.append(event.delta)
        final = stream.get_final_completion()
    chunks = stream_chunks(recorder.last())
    assert all("usage" not in ch for ch in chunks)
    assert final.usage is None
    assert "".join(text) == final.choices[0].message.content == fake_reply_text(PROMPT)

    for chunk in client.chat.completions.create(model=BETA_MODEL, messages=MESSAGES, stream=True):
        assert chunk.usage is None and "usage" not in chunk.to_dict()
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
    assert finish == "stop"
    assert all("usage" not in ch for ch in stream_chunks(recorder.last()))

    recs = primary.requests("chat_completions", PATH)
    assert len(recs) == 2 == len(recorder.exchanges)
    for rec, ex in zip(recs, recorder.exchanges):
        assert rec["body"] == with_usage_option(ex.body)
    meter.expect(BETA_MODEL, *(Tokens(fake_input_tokens(r["body"]), FAKE_REPLY_WORDS) for r in recs))


def same_request(objs: list[dict]) -> list[dict]:
    """Blanks what differs between two replies to the same request."""
    return [{**o, "id": "-", "created": 0} for o in objs]


def test_reasoning_stream_without_usage(
    beta: BetaClients, gw: Gateway, primary: Fake, recorder: RecordingTransport
) -> None:
    """A reasoning model streams to a client that did not ask for usage: the
    client's chunks are exactly those the vendor itself sends such a client,
    and the account is charged the vendor's figures, with the reasoning
    tokens that the text does not show."""
    primary.control(format="chat_completions", reasoning_tokens=REASONING_TOKENS)
    meter = Meter(gw, gw.reasoning_readonly)
    client = beta(key=gw.reasoning_key)
    vendor = vendor_chat_completions_client(recorder)
    try:
        got = list(client.chat.completions.create(model=REASONING_MODEL, messages=MESSAGES, stream=True))
        through = recorder.last()
        assert primary.only_request("chat_completions", PATH)["body"] == with_usage_option(through.body)
        want = list(vendor.chat.completions.create(model=REASONING_MODEL, messages=MESSAGES, stream=True))
        direct = recorder.last()
        assert direct.body == through.body

        # The SDK's objects, fields as sent, and each event's data on the wire.
        assert same_request([c.to_dict() for c in got]) == same_request([c.to_dict() for c in want])
        assert same_request(stream_chunks(through)) == same_request(stream_chunks(direct))
        assert all(c.usage is None for c in got)
        assert "".join(ch.delta.content or "" for c in got for ch in c.choices) == fake_reply_text(PROMPT)

        # The stream helper's final completion, likewise.
        with client.chat.completions.stream(model=REASONING_MODEL, messages=MESSAGES) as stream:
            final = stream.get_final_completion()
        with vendor.chat.completions.stream(model=REASONING_MODEL, messages=MESSAGES) as stream:
            final_direct = stream.get_final_completion()
        assert final.usage is None
        assert same_request([final.to_dict()]) == same_request([final_direct.to_dict()])

        # Gateway and vendor requests alternate in the fake's records.
        recs = primary.requests("chat_completions", PATH)
        assert len(recs) == 4
        sent = [recs[0]["body"], recs[2]["body"]]
        assert all(b'"stream_options":{"include_usage":true}' in b for b in sent)
        meter.expect(
            REASONING_MODEL, *(Tokens(fake_input_tokens(b), FAKE_REPLY_WORDS + REASONING_TOKENS) for b in sent)
        )
    finally:
        vendor.close()
        meter.close()


def test_max_tokens_cuts_reply(beta: BetaClients, recorder: RecordingTransport, meter: Meter) -> None:
    c = beta().chat.completions.create(model=BETA_MODEL, messages=MESSAGES, max_completion_tokens=3)
    assert_typed(c, ChatCompletion, recorder.last().response_json())
    assert c.choices[0].finish_reason == "length" and c.usage is not None and c.usage.completion_tokens == 3
    assert c.choices[0].message.content == fake_reply_text(PROMPT, 3)
    meter_expect(meter, c.usage)


def test_system_message_reaches_vendor(
    beta: BetaClients, primary: Fake, recorder: RecordingTransport, meter: Meter
) -> None:
    system = {"role": "system", "content": "You are terse. Réponds en français. 絵文字なし。"}
    client = beta()
    c = client.chat.completions.create(
        model=BETA_MODEL, messages=[system, {"role": "user", "content": "Quelle heure est-il ?"}], max_tokens=64
    )
    rec = primary.only_request("chat_completions", PATH)
    assert rec["body"] == recorder.last().body
    assert json.loads(rec["body"])["messages"][0] == system
    assert c.choices[0].message.content == fake_reply_text("Quelle heure est-il ?")
    assert c.usage is not None
    meter_expect(meter, c.usage)


def test_tools_reach_vendor_byte_identical(
    beta: BetaClients, primary: Fake, recorder: RecordingTransport, meter: Meter
) -> None:
    primary.control(format="chat_completions", tool_call=True)
    client = beta()
    tools = tooldefs.beta_tools()
    question = {"role": "user", "content": "Book «Café ☕ with Zoë» tomorrow 9:00 in Zürich."}
    c = client.chat.completions.create(model=BETA_MODEL, messages=[question], tools=tools, tool_choice="auto")
    ex = recorder.last()
    assert len(ex.body) > 10_000
    rec = primary.only_request("chat_completions", PATH)
    assert rec["body"] == ex.body, "the vendor received a different body than the SDK sent"
    assert json.loads(rec["body"])["tools"] == tools

    assert_typed(c, ChatCompletion, ex.response_json())
    choice = c.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    assert choice.message.tool_calls is not None and len(choice.message.tool_calls) == 1
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "create_calendar_event"
    assert json.loads(call.function.arguments) == tooldefs.FIRST_TOOL_ARGUMENTS
    assert c.usage is not None
    meter_expect(meter, c.usage)

    # The client runs the tool and returns its result; the fake answers in
    # text, as a model does after a tool result.
    follow = client.chat.completions.create(
        model=BETA_MODEL,
        tools=tools,
        messages=[
            question,
            choice.message.to_dict(),
            {"role": "tool", "tool_call_id": call.id, "content": "booked ✓"},
        ],
    )
    assert recorder.last().body == primary.requests("chat_completions", PATH)[-1]["body"]
    assert_typed(follow, ChatCompletion, recorder.last().response_json())
    assert follow.choices[0].finish_reason == "stop"
    assert follow.choices[0].message.content == fake_reply_text("booked ✓")
    assert follow.usage is not None
    meter_expect(meter, follow.usage)


def test_tools_streaming(beta: BetaClients, primary: Fake, recorder: RecordingTransport, meter: Meter) -> None:
    primary.control(format="chat_completions", tool_call=True)
    client = beta()
    arg_deltas = []
    with client.chat.completions.stream(
        model=BETA_MODEL,
        messages=[{"role": "user", "content": "Weather in 東京?"}],
        tools=tooldefs.beta_tools(),
        stream_options={"include_usage": True},
    ) as stream:
        for event in stream:
            if event.type == "tool_calls.function.arguments.delta" and event.arguments_delta:
                arg_deltas.append(event.arguments_delta)
        final = stream.get_final_completion()
    ex = recorder.last()
    stream_chunks(ex)
    rec = primary.only_request("chat_completions", PATH)
    assert rec["body"] == ex.body
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls
    assert calls is not None and len(calls) == 1
    assert calls[0].function.name == "create_calendar_event"
    assert json.loads(calls[0].function.arguments) == tooldefs.FIRST_TOOL_ARGUMENTS
    assert json.loads("".join(arg_deltas)) == tooldefs.FIRST_TOOL_ARGUMENTS
    assert final.usage is not None and final.usage.completion_tokens == len(arg_deltas)
    meter_expect(meter, final.usage)


# --- errors -----------------------------------------------------------------


def check_error(err: openai.APIStatusError, status: int, code: str | None = None) -> None:
    """The error is the vendor's: its status, JSON content type and a body
    {"error": ...} that the SDK's ErrorObject type validates."""
    assert err.status_code == status
    assert err.response.headers["content-type"].startswith("application/json")
    body = err.response.json()
    assert set(body) == {"error"}, body
    validate(ErrorObject, body["error"])
    assert body["error"]["message"] and body["error"]["type"], body
    assert err.type == body["error"]["type"] and err.message
    if code is not None:
        assert err.code == code, body


def create(client: openai.OpenAI, **kw: object) -> ChatCompletion:
    args = {"model": BETA_MODEL, "messages": MESSAGES, "max_tokens": 16, **kw}
    return client.chat.completions.create(**args)  # type: ignore[arg-type]


def test_bad_key_is_authentication_error(beta: BetaClients, primary: Fake, meter: Meter) -> None:
    with pytest.raises(openai.AuthenticationError) as e:
        create(beta(key="cr_" + "0" * 40, max_retries=0))
    check_error(e.value, 401, "invalid_api_key")
    assert primary.requests("chat_completions", PATH) == []
    meter.expect_nothing()


def test_readonly_token_is_permission_denied(beta: BetaClients, gw: Gateway, primary: Fake, meter: Meter) -> None:
    with pytest.raises(openai.PermissionDeniedError) as e:
        create(beta(key=gw.readonly, max_retries=0))
    check_error(e.value, 403)
    assert primary.requests("chat_completions", PATH) == []
    meter.expect_nothing()


def test_no_balance_is_402(beta: BetaClients, gw: Gateway, primary: Fake) -> None:
    with pytest.raises(openai.APIStatusError) as e:
        create(beta(key=gw.poor_key, max_retries=0))
    # openai has no class of its own for 402.
    assert type(e.value) is openai.APIStatusError
    check_error(e.value, 402, "insufficient_quota")
    assert primary.requests("chat_completions", PATH) == []


def test_rate_limit_is_rate_limit_error(beta: BetaClients, gw: Gateway, primary: Fake) -> None:
    meter = Meter(gw, gw.limited_beta_readonly)
    try:
        client = beta(key=gw.limited_beta_key, max_retries=0)
        c = create(client)
        assert c.usage is not None
        meter_expect(meter, c.usage)
        with pytest.raises(openai.RateLimitError) as e:
            create(client)
        check_error(e.value, 429, "rate_limit_exceeded")
        assert len(primary.requests("chat_completions", PATH)) == 1
        meter.expect_nothing()
    finally:
        meter.close()


def test_sdk_retry_honours_retry_after(
    beta: BetaClients, primary: Fake, recorder: RecordingTransport, meter: Meter
) -> None:
    primary.control(format="chat_completions", status=429, status_count=1, retry_after="1")
    c = create(beta(), max_tokens=64)  # the SDK's default retries
    assert c.choices[0].message.content == fake_reply_text(PROMPT)

    first, second = recorder.exchanges
    assert first.status == 429 and first.response_headers.get("retry-after") == "1"
    assert validate(ErrorObject, json.loads(bytes(first.response_body))["error"]).code == "rate_limit_exceeded"
    assert second.status == 200 and second.headers.get("x-stainless-retry-count") == "1"
    # Without retry-after the SDK's first backoff is at most 0.5 s.
    assert second.sent_at - first.sent_at >= 0.9
    assert second.body == first.body
    assert len(primary.requests("chat_completions", PATH)) == 2
    assert c.usage is not None
    meter_expect(meter, c.usage)  # charged once, for the reply


def test_unknown_model_is_bad_request(beta: BetaClients, primary: Fake, meter: Meter) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        create(beta(max_retries=0), model="no-such-model")
    check_error(e.value, 400, "model_not_found")
    assert primary.requests("chat_completions", PATH) == []
    meter.expect_nothing()


def test_malformed_body_is_bad_request(beta: BetaClients, primary: Fake, meter: Meter) -> None:
    client = beta(max_retries=0)
    # A field of the wrong type, slipped past the SDK's types.
    with pytest.raises(openai.BadRequestError) as e:
        create(client, extra_body={"max_tokens": "lots"})
    check_error(e.value, 400)
    # Not JSON at all, through the SDK's low-level client.
    with pytest.raises(openai.BadRequestError) as e:
        truncated = b'{"model": "' + BETA_MODEL.encode() + b'", "messages": '
        client.post("/chat/completions", cast_to=ChatCompletion, content=truncated)
    check_error(e.value, 400)
    assert primary.requests("chat_completions", PATH) == []
    meter.expect_nothing()


def test_unknown_path_is_not_found(beta: BetaClients, primary: Fake, meter: Meter) -> None:
    client = beta(max_retries=0)
    with pytest.raises(openai.NotFoundError) as e:
        client.models.retrieve("no-such-model")
    check_error(e.value, 404)
    with pytest.raises(openai.NotFoundError) as e:
        client.post("/no/such/endpoint", cast_to=ChatCompletion, body={"model": BETA_MODEL})
    check_error(e.value, 404)
    with pytest.raises(openai.NotFoundError) as e:
        client.get("/chat/completions", cast_to=ChatCompletion)  # a wrong method on a model path
    check_error(e.value, 404)
    assert primary.requests("chat_completions", "/v1/no/such/endpoint") == [] and primary.requests("chat_completions", PATH) == []
    meter.expect_nothing()


def test_models_list(beta: BetaClients, recorder: RecordingTransport, meter: Meter) -> None:
    models = list(beta().models.list())
    assert all(isinstance(m, Model) for m in models)
    assert BETA_MODEL in [m.id for m in models]
    for m in recorder.last().response_json()["data"]:
        validate(Model, m)
    assert unknown_fields(models) == []
    meter.expect_nothing()  # a free path
