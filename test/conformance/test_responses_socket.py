"""The Responses API's WebSocket transport: the official openai SDK's
client.responses.connect() against {gateway}/beta/v1, each response billed
from the vendor's usage like a streamed POST."""

from __future__ import annotations

import openai
import pytest

from gwtest import RESPONSES_MODEL, BetaClients, Fake, Gateway, Meter, Tokens


def tokens(usage: object) -> Tokens:
    cached = usage.input_tokens_details.cached_tokens
    return Tokens(input=usage.input_tokens - cached, output=usage.output_tokens, cache_read=cached)


def run_response(conn: object) -> object:
    """Reads events up to the terminal one and returns it."""
    for ev in conn:
        if ev.type in ("response.completed", "response.incomplete", "response.failed", "error"):
            return ev
    raise AssertionError("the socket closed before the response ended")


def test_two_responses_on_one_socket(beta: BetaClients, primary: Fake, meter: Meter) -> None:
    """Two responses on one socket, the second continuing the first with
    store: false (kept only by the socket), each billed exactly."""
    client = beta()
    with client.responses.connect() as conn:
        conn.response.create(model=RESPONSES_MODEL, instructions="Be brief.", input="Hello over the socket")
        first = run_response(conn)
        assert first.type == "response.completed", first
        assert first.response.output_text.startswith("Echo:")
        meter.expect(RESPONSES_MODEL, tokens(first.response.usage))

        conn.response.create(model=RESPONSES_MODEL, input="And again", store=False, previous_response_id=first.response.id)
        second = run_response(conn)
        assert second.type == "response.completed", second
        meter.expect(RESPONSES_MODEL, tokens(second.response.usage))

    creates = [r for r in primary.requests("chat_completions", "/v1/responses") if r["method"] == "WS"]
    assert len(creates) == 2


def test_refusal_is_an_error_event(beta: BetaClients, gw: Gateway, meter: Meter) -> None:
    """An unknown model is refused with the vendor's error event; the socket
    serves the next response."""
    client = beta()
    with client.responses.connect() as conn:
        conn.response.create(model="no-such-model", input="hi")
        ev = run_response(conn)
        assert ev.type == "error" and ev.error.code == "model_not_found", ev
        meter.expect_nothing()
        conn.response.create(model=RESPONSES_MODEL, input="now a real one")
        ok = run_response(conn)
        assert ok.type == "response.completed", ok
        meter.expect(RESPONSES_MODEL, tokens(ok.response.usage))


def test_bad_key_refused_at_the_handshake(beta: BetaClients) -> None:
    client = beta(key="cr_not_a_key", max_retries=0)
    with pytest.raises(Exception) as info:
        with client.responses.connect(max_retries=0) as conn:
            conn.response.create(model=RESPONSES_MODEL, input="hi")
            run_response(conn)
    assert "401" in str(info.value), info.value
