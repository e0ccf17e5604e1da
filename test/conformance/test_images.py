"""Image generation: the official openai SDK against
{gateway}/beta/v1/images/generations, JSON and streamed with partial
images, billed to the nano-USD at the catalogue's prices (read here from
the catalogue JSON, not from the gateway)."""

from __future__ import annotations

import decimal
import fractions
import json
import math
import os
import typing

import openai
import pytest

from gwtest import BetaClients, Gateway, Usage, nano

CATALOGUE = os.environ.get("GATEWAY_CATALOGUE", ".cache/catalogue/model_prices_and_context_window.json")


def expected_nano(model: str, usages: list) -> int:
    """Text input at input_cost_per_token, image input at
    input_cost_per_image_token, image output at output_cost_per_image_token;
    the sum rounded up once to a nano-USD."""
    with open(CATALOGUE) as f:
        e = json.load(f, parse_float=decimal.Decimal)[model]
    p = lambda field: fractions.Fraction(e[field])  # noqa: E731
    s = fractions.Fraction(0)
    for u in usages:
        d = u.input_tokens_details
        s += d.text_tokens * p("input_cost_per_token") + u.output_tokens * p("output_cost_per_image_token")
        if d.image_tokens:
            s += d.image_tokens * p("input_cost_per_image_token")
    return math.ceil(s * 1_000_000_000)


def spent(usage: Usage, before: dict) -> int:
    return nano(usage.read()["usage"]["cost_usd"]) - nano(before["usage"]["cost_usd"])


@pytest.fixture
def usage(gw: Gateway) -> typing.Iterator[Usage]:
    u = Usage(gw, gw.readonly)
    yield u
    u.http.close()


def test_images_json_and_stream(beta: BetaClients, usage: Usage) -> None:
    client = beta()

    before = usage.read()
    r = client.images.generate(model="gpt-image-1", prompt="A lighthouse at dawn", n=2, size="1024x1536", quality="high")
    assert r.data is not None and len(r.data) == 2 and r.data[0].b64_json and r.usage is not None
    assert spent(usage, before) == expected_nano("gpt-image-1", [r.usage])

    before = usage.read()
    partials, done = 0, []
    for ev in client.images.generate(model="gpt-image-1", prompt="A lighthouse", stream=True, partial_images=2):
        if ev.type == "image_generation.partial_image":
            partials += 1
        elif ev.type == "image_generation.completed":
            done.append(ev)
    assert partials == 2 and len(done) == 1 and done[0].usage.output_tokens > 0
    assert spent(usage, before) == expected_nano("gpt-image-1", [d.usage for d in done])


def test_image_without_prompt_refused(beta: BetaClients, usage: Usage) -> None:
    before = usage.read()
    try:
        beta().images.generate(model="gpt-image-1", prompt="")
    except openai.BadRequestError as e:
        assert e.status_code == 400 and e.body["param"] == "prompt"
    else:
        raise AssertionError("an empty prompt was served")
    assert spent(usage, before) == 0
