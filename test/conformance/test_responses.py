"""The Responses API and embeddings: the official openai SDK against
{gateway}/beta/v1, billed from the vendor's usage; stored responses
reachable only by the account that created them."""

from __future__ import annotations

import openai
import pytest

from gwtest import RESPONSES_MODEL, BetaClients, Fake, Gateway, Meter, Tokens

EMBEDDING_MODEL = "text-embedding-3-small"


def tokens(usage: object) -> Tokens:
    """The gateway's reading of a response's usage: input without the
    cached tokens, reasoning inside output."""
    cached = usage.input_tokens_details.cached_tokens
    return Tokens(input=usage.input_tokens - cached, output=usage.output_tokens, cache_read=cached)


def test_create_json_and_stream(beta: BetaClients, meter: Meter) -> None:
    client = beta()
    r = client.responses.create(model=RESPONSES_MODEL, instructions="Be brief.", input="Hello from Python")
    assert r.status == "completed" and r.output_text.startswith("Echo:")
    meter.expect(RESPONSES_MODEL, tokens(r.usage))

    final = None
    text = ""
    with client.responses.stream(model=RESPONSES_MODEL, input="Stream to me") as stream:
        for ev in stream:
            if ev.type == "response.output_text.delta":
                text += ev.delta
        final = stream.get_final_response()
    assert text.startswith("Echo:") and final.status == "completed"
    meter.expect(RESPONSES_MODEL, tokens(final.usage))


def test_stored_response_paths(beta: BetaClients, gw: Gateway, primary: Fake, meter: Meter) -> None:
    client = beta()
    r = client.responses.create(model=RESPONSES_MODEL, input="Remember this")
    meter.expect(RESPONSES_MODEL, tokens(r.usage))

    # Reading it back, its input and a token count are free.
    assert client.responses.retrieve(r.id).id == r.id
    assert len(list(client.responses.input_items.list(r.id))) >= 1
    n = client.responses.input_tokens.count(model=RESPONSES_MODEL, input="more", previous_response_id=r.id)
    assert n.input_tokens > 0
    meter.expect_nothing()

    # Another account (here one with no balance) is told it does not exist,
    # and the vendor never hears of it.
    seen = len(primary.requests("chat_completions", "/v1/responses/" + r.id))
    other = beta(key=gw.poor_key, max_retries=0)
    for attempt in (
        lambda: other.responses.retrieve(r.id),
        lambda: other.responses.delete(r.id),
        lambda: other.responses.cancel(r.id),
        lambda: list(other.responses.input_items.list(r.id)),
        lambda: other.responses.create(model=RESPONSES_MODEL, input="steal", previous_response_id=r.id),
        lambda: other.responses.input_tokens.count(model=RESPONSES_MODEL, input="x", previous_response_id=r.id),
    ):
        with pytest.raises(openai.NotFoundError):
            attempt()
    assert len(primary.requests("chat_completions", "/v1/responses/" + r.id)) == seen
    assert not any(b"steal" in rec["body"] for rec in primary.requests("chat_completions", "/v1/responses"))

    # The owner continues it (a new, billed turn) and deletes it.
    nxt = client.responses.create(model=RESPONSES_MODEL, input="And then?", previous_response_id=r.id)
    meter.expect(RESPONSES_MODEL, tokens(nxt.usage))
    client.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)
    meter.expect_nothing()


def test_compact_is_metered(beta: BetaClients, meter: Meter) -> None:
    c = beta().responses.compact(model=RESPONSES_MODEL, input="A long conversation to compact")
    assert c.object == "response.compaction"
    meter.expect(RESPONSES_MODEL, tokens(c.usage))


def test_background_polled_and_cancelled(beta: BetaClients, meter: Meter) -> None:
    client = beta()
    bg = client.responses.create(model=RESPONSES_MODEL, input="Work in the background", background=True)
    assert bg.status == "queued" and bg.usage is None
    meter.expect_nothing()  # held, not billed yet
    polled = bg
    for _ in range(20):
        if polled.status == "completed":
            break
        polled = client.responses.retrieve(bg.id)
    assert polled.status == "completed"
    meter.expect(RESPONSES_MODEL, tokens(polled.usage))
    client.responses.retrieve(bg.id)  # read again: billed once
    meter.expect_nothing()

    bg2 = client.responses.create(
        model=RESPONSES_MODEL, input="Cancel me", background=True,
        extra_headers={"x-fake-controls": '{"background_polls":5}'},
    )
    c = client.responses.cancel(bg2.id)
    assert c.status == "cancelled"
    meter.expect(RESPONSES_MODEL, tokens(c.usage))


def test_embeddings(beta: BetaClients, meter: Meter) -> None:
    e = beta().embeddings.create(model=EMBEDDING_MODEL, input=["one", "two"])
    assert len(e.data) == 2 and len(e.data[0].embedding) > 0
    meter.expect(EMBEDDING_MODEL, Tokens(input=e.usage.prompt_tokens, output=0))
