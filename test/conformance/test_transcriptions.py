"""Audio transcriptions: the official openai SDK against
{gateway}/beta/v1/audio/transcriptions, JSON and streamed, billed to the
nano-USD at the catalogue's prices (read here from the catalogue JSON, not
from the gateway)."""

from __future__ import annotations

import decimal
import fractions
import io
import json
import math
import os
import typing

import openai
import pytest

from gwtest import BetaClients, Gateway, Usage, nano

CATALOGUE = os.environ.get("GATEWAY_CATALOGUE", ".cache/catalogue/model_prices_and_context_window.json")


def catalogue(model: str) -> dict:
    with open(CATALOGUE) as f:
        return json.load(f, parse_float=decimal.Decimal)[model]


def expected_nano(model: str, usage: object) -> int:
    """Tokens at their per-token prices, or whole seconds (rounded up) at
    input_cost_per_second; the sum rounded up once to a nano-USD."""
    e = catalogue(model)
    p = lambda field: fractions.Fraction(e[field])  # noqa: E731
    if usage.type == "duration":
        s = math.ceil(usage.seconds) * p("input_cost_per_second")
    else:
        d = usage.input_token_details
        s = (
            d.text_tokens * p("input_cost_per_token")
            + d.audio_tokens * p("input_cost_per_audio_token")
            + usage.output_tokens * p("output_cost_per_token")
        )
    return math.ceil(s * 1_000_000_000)


def audio(n: int) -> tuple[str, io.BytesIO, str]:
    return ("speech.mp3", io.BytesIO(b"\xff\xfb\x90\x44" * (n // 4)), "audio/mpeg")


def spent(gw: Gateway, usage: Usage, before: dict) -> int:
    return nano(usage.read()["usage"]["cost_usd"]) - nano(before["usage"]["cost_usd"])


@pytest.fixture
def usage(gw: Gateway) -> typing.Iterator[Usage]:
    u = Usage(gw, gw.readonly)
    yield u
    u.http.close()


def test_transcriptions_json_and_stream(gw: Gateway, beta: BetaClients, usage: Usage) -> None:
    client = beta()

    before = usage.read()
    t = client.audio.transcriptions.create(model="gpt-4o-transcribe", file=audio(32_000))
    assert t.text.startswith("Echo:") and t.usage.type == "tokens"
    assert spent(gw, usage, before) == expected_nano("gpt-4o-transcribe", t.usage)

    before = usage.read()
    done = None
    deltas = []
    for ev in client.audio.transcriptions.create(model="gpt-4o-mini-transcribe", file=audio(16_000), stream=True):
        if ev.type == "transcript.text.delta":
            deltas.append(ev.delta)
        elif ev.type == "transcript.text.done":
            done = ev
    assert done is not None and "".join(deltas) == done.text and done.usage is not None
    assert spent(gw, usage, before) == expected_nano("gpt-4o-mini-transcribe", done.usage)

    before = usage.read()
    w = client.audio.transcriptions.create(model="whisper-1", file=audio(40_000))
    assert w.usage.type == "duration" and w.usage.seconds == 2.5
    assert spent(gw, usage, before) == expected_nano("whisper-1", w.usage)


def test_transcription_text_format_refused(gw: Gateway, beta: BetaClients, usage: Usage) -> None:
    before = usage.read()
    try:
        beta().audio.transcriptions.create(model="whisper-1", file=audio(4000), response_format="text")
    except openai.BadRequestError as e:
        assert e.status_code == 400 and e.body["param"] == "response_format" and "no usage" in e.body["message"]
    else:
        raise AssertionError("response_format=text was served")
    assert spent(gw, usage, before) == 0
