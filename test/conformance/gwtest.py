"""Helpers of the SDK conformance suite: the fake vendors' control API, the
fake's deterministic replies, a recording transport for the SDKs' http
clients, checks of the SDKs' typed objects, and metering checks through
GET /v1/usage. The fixtures built from them are in conftest.py."""

from __future__ import annotations

import base64
import json
import os
import time
import typing
from dataclasses import dataclass, field

import anthropic
import httpx2
import openai
import pydantic
import pytest


def _env(name: str) -> str:
    v = os.environ.get(name)
    if not v:
        pytest.exit(f"{name} is not set: run this suite with `go test ./test/conformance/`", returncode=4)
    return v


ALPHA_MODEL = os.environ.get("GATEWAY_ALPHA_MODEL", "claude-haiku-4-5")
BETA_MODEL = os.environ.get("GATEWAY_BETA_MODEL", "gpt-4o-mini")
REASONING_MODEL = os.environ.get("GATEWAY_REASONING_MODEL", "o4-mini")
# Served on the Responses API only (the catalogue's mode "responses").
RESPONSES_MODEL = os.environ.get("GATEWAY_RESPONSES_MODEL", "gpt-5.1-codex")
REASONING_TOKENS = int(os.environ.get("GATEWAY_REASONING_TOKENS", "377"))


@dataclass(frozen=True)
class Gateway:
    url: str
    key: str  # cr_ key of the main account
    readonly: str  # ro_ token of the main account
    poor_key: str  # cr_ key of an account whose balance covers no request
    limited_alpha_key: str  # cr_ key of an account limited to 1 request a minute
    limited_alpha_readonly: str
    limited_beta_key: str  # the same, for the the chat-completions format cases
    limited_beta_readonly: str
    reasoning_key: str  # cr_ key of the account the reasoning cases use
    reasoning_readonly: str
    prices: dict  # model -> nano-USD per million tokens

    @classmethod
    def from_env(cls) -> "Gateway":
        return cls(
            url=_env("GATEWAY_URL"),
            key=_env("GATEWAY_KEY"),
            readonly=_env("GATEWAY_READONLY"),
            poor_key=_env("GATEWAY_POOR_KEY"),
            limited_alpha_key=_env("GATEWAY_LIMITED_ALPHA_KEY"),
            limited_alpha_readonly=_env("GATEWAY_LIMITED_ALPHA_READONLY"),
            limited_beta_key=_env("GATEWAY_LIMITED_BETA_KEY"),
            limited_beta_readonly=_env("GATEWAY_LIMITED_BETA_READONLY"),
            reasoning_key=_env("GATEWAY_REASONING_KEY"),
            reasoning_readonly=_env("GATEWAY_REASONING_READONLY"),
            prices=json.loads(_env("GATEWAY_PRICES")),
        )


# --- the fake vendors -------------------------------------------------------


class Fake:
    """The control API of one fake vendor process (cmd/fakevendor)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.http = httpx2.Client(base_url=url, trust_env=False, timeout=10)

    def control(self, **settings: object) -> None:
        r = self.http.post("/control", json=settings)
        assert r.status_code == 200, r.text

    def close(self) -> None:
        self.http.close()

    def reset(self) -> None:
        r = self.http.post("/reset")
        assert r.status_code == 200, r.text

    def requests(self, format: str, path: str) -> list[dict]:
        """The requests received in a wire format ("messages" or
        "chat_completions") to path, oldest first, with "body" decoded to
        bytes."""
        r = self.http.get("/requests", params={"format": format, "path": path})
        assert r.status_code == 200, r.text
        recs = r.json() or []
        for rec in recs:
            rec["body"] = base64.b64decode(rec.get("body") or "")
        return recs

    def only_request(self, format: str, path: str) -> dict:
        recs = self.requests(format, path)
        assert len(recs) == 1, f"fake received {len(recs)} {format} {path} requests, want 1"
        return recs[0]


# --- the fake's deterministic replies (see cmd/fakevendor/reply.go) ----------

FAKE_REPLY_WORDS = 12
FILLER_WORDS = ["lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit"]


def fake_input_tokens(body: bytes) -> int:
    return (len(body) + 7) // 8


def fake_reply_text(user_text: str, n: int = FAKE_REPLY_WORDS) -> str:
    """The fake's text reply: "Echo:" and the words of the last user message,
    cycled, n words in all."""
    # Words are cut to 32 bytes on a character boundary.
    words = [w.encode()[:32].decode(errors="ignore") for w in user_text.split()] or FILLER_WORDS
    out = ["Echo:"]
    i = 0
    while len(out) < n:
        out.append(words[i % len(words)])
        i += 1
    return " ".join(out[:n])


# --- recording the SDK's traffic --------------------------------------------


@dataclass
class Exchange:
    """One HTTP exchange of an SDK client, as sent and as received."""

    method: str
    url: str
    headers: httpx2.Headers
    body: bytes
    sent_at: float
    status: int = 0
    response_headers: httpx2.Headers = field(default_factory=httpx2.Headers)
    response_body: bytearray = field(default_factory=bytearray)

    def response_json(self) -> typing.Any:
        return json.loads(bytes(self.response_body))

    def sse_data(self) -> list[tuple[str | None, str]]:
        """The (event, data) pairs of an event-stream response."""
        out: list[tuple[str | None, str]] = []
        text = bytes(self.response_body).decode()
        for block in text.replace("\r\n", "\n").split("\n\n"):
            event, data = None, []
            for line in block.split("\n"):
                if line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].lstrip(" "))
            if data:
                out.append((event, "\n".join(data)))
        return out


class _Tee(httpx2.SyncByteStream):
    def __init__(self, inner: typing.Any, sink: bytearray) -> None:
        self.inner, self.sink = inner, sink

    def __iter__(self) -> typing.Iterator[bytes]:
        for chunk in self.inner:
            self.sink.extend(chunk)
            yield chunk

    def close(self) -> None:
        self.inner.close()


class RecordingTransport(httpx2.BaseTransport):
    """Sends requests with httpx2's own transport, unchanged, and keeps a copy
    of each request and of each response body as the SDK reads it."""

    def __init__(self) -> None:
        self.inner = httpx2.HTTPTransport()
        self.exchanges: list[Exchange] = []

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        ex = Exchange(
            method=request.method,
            url=str(request.url),
            headers=httpx2.Headers(request.headers),
            body=request.read(),
            sent_at=time.monotonic(),
        )
        self.exchanges.append(ex)
        response = self.inner.handle_request(request)
        ex.status = response.status_code
        ex.response_headers = httpx2.Headers(response.headers)
        response.stream = _Tee(response.stream, ex.response_body)
        return response

    def close(self) -> None:
        self.inner.close()

    def last(self) -> Exchange:
        assert self.exchanges, "the SDK sent no request"
        return self.exchanges[-1]


AlphaClients = typing.Callable[..., anthropic.Anthropic]
BetaClients = typing.Callable[..., openai.OpenAI]


def alpha_client(
    gw: Gateway, recorder: RecordingTransport, key: str | None = None, **kw: typing.Any
) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=f"{gw.url}/alpha",
        api_key=key or gw.key,
        http_client=anthropic.DefaultHttpxClient(transport=recorder),
        **kw,
    )


def beta_client(
    gw: Gateway, recorder: RecordingTransport, key: str | None = None, **kw: typing.Any
) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{gw.url}/beta/v1",
        api_key=key or gw.key,
        http_client=openai.DefaultHttpxClient(transport=recorder),
        **kw,
    )


def vendor_chat_completions_client(recorder: RecordingTransport) -> openai.OpenAI:
    """An openai client for the primary fake vendor itself, without the
    gateway: what the vendor sends a client directly."""
    return openai.OpenAI(
        base_url=_env("FAKE_PRIMARY_CHAT_COMPLETIONS") + "/v1",
        api_key=_env("FAKE_CHAT_COMPLETIONS_KEY"),
        http_client=openai.DefaultHttpxClient(transport=recorder),
    )


# --- checking typed objects -------------------------------------------------


def unknown_fields(obj: typing.Any, path: str = "$") -> list[str]:
    """Paths of fields a parsed SDK object holds that its type does not
    declare: fields the fake sends that the vendor's format does not have."""
    out: list[str] = []
    if isinstance(obj, pydantic.BaseModel):
        for k in (obj.model_extra or {}):
            out.append(f"{path}.{k}")
        for name in type(obj).model_fields:
            out += unknown_fields(getattr(obj, name, None), f"{path}.{name}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            out += unknown_fields(v, f"{path}[{i}]")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            out += unknown_fields(v, f"{path}.{k}")
    return out


def validate(type_: typing.Any, raw: typing.Any) -> typing.Any:
    """Validates raw JSON against an SDK type with pydantic (the SDKs' own
    parsing is lenient and never fails) and checks that it holds no field
    the type does not declare. Returns the validated object."""
    v = pydantic.TypeAdapter(type_).validate_python(raw)
    assert unknown_fields(v) == [], f"fields the SDK's types do not declare: {unknown_fields(v)}"
    return v


def assert_typed(obj: typing.Any, type_: typing.Any, raw: typing.Any) -> None:
    """obj, which the SDK parsed from raw, is an instance of type_; raw
    validates against type_; obj serializes back to raw without a warning."""
    if isinstance(type_, type):
        assert isinstance(obj, type_), f"{type(obj)} is not {type_}"
    validate(type_, raw)
    assert unknown_fields(obj) == [], f"fields the SDK's types do not declare: {unknown_fields(obj)}"
    if isinstance(obj, pydantic.BaseModel):
        assert obj.to_dict(mode="json") == raw  # type: ignore[attr-defined]


# --- metering ---------------------------------------------------------------


class Usage:
    """GET /v1/usage?period=day with a read-only token, before and after."""

    def __init__(self, gw: Gateway, token: str) -> None:
        self.gw, self.token = gw, token
        self.http = httpx2.Client(trust_env=False, timeout=10)

    def read(self) -> dict:
        r = self.http.get(
            f"{self.gw.url}/v1/usage", params={"period": "day"}, headers={"Authorization": f"Bearer {self.token}"}
        )
        assert r.status_code == 200, r.text
        return r.json()


def nano(usd: float) -> int:
    return round(usd * 1_000_000_000)


@dataclass(frozen=True)
class Tokens:
    """One call's usage as the gateway meters it: input excludes cache
    reads and writes."""

    input: int
    output: int
    cache_write: int = 0
    cache_read: int = 0


def cost(prices: dict, model: str, t: Tokens) -> int:
    """The gateway's cost of one call in nano-USD: prices are nano-USD per
    million tokens, the sum is rounded up to a whole nano-USD."""
    p = prices[model]
    s = (
        t.input * p["input"]
        + t.output * p["output"]
        + t.cache_write * p["cache_write"]
        + t.cache_read * p["cache_read"]
    )
    return (s + 999_999) // 1_000_000


class Meter:
    """Checks that one call moved the account's usage by exactly what the
    vendor reported, priced by the table."""

    def __init__(self, gw: Gateway, token: str | None = None) -> None:
        self.gw = gw
        self.usage = Usage(gw, token or gw.readonly)
        self.before = self.usage.read()

    def close(self) -> None:
        self.usage.http.close()

    def delta(self) -> dict:
        after = self.usage.read()
        b, a = self.before, after
        d = {k: a["usage"][k] - b["usage"][k] for k in ("input_tokens", "output_tokens", "cache_tokens", "requests")}
        d["cost"] = nano(a["usage"]["cost_usd"]) - nano(b["usage"]["cost_usd"])
        d["balance"] = nano(a["balance_usd"]) - nano(b["balance_usd"])
        d["daily_used"] = nano(a["limits"]["daily_used_usd"]) - nano(b["limits"]["daily_used_usd"])
        models_b = {m["model"]: m for m in b["by_model"]}
        d["by_model"] = {}
        for m in a["by_model"]:
            mb = models_b.get(m["model"], {"requests": 0, "input_tokens": 0, "output_tokens": 0, "cost_usd": 0})
            if m["requests"] != mb["requests"]:
                d["by_model"][m["model"]] = {
                    "requests": m["requests"] - mb["requests"],
                    "input_tokens": m["input_tokens"] - mb["input_tokens"],
                    "output_tokens": m["output_tokens"] - mb["output_tokens"],
                    "cost": nano(m["cost_usd"]) - nano(mb["cost_usd"]),
                }
        self.before = after
        return d

    def expect(self, model: str, *calls: Tokens) -> None:
        """The account's usage moved by exactly the calls' tokens, each call
        priced by the table and rounded up on its own, as the gateway does."""
        c = sum(cost(self.gw.prices, model, t) for t in calls)
        tin, tout = sum(t.input for t in calls), sum(t.output for t in calls)
        d = self.delta()
        want = {
            "input_tokens": tin,
            "output_tokens": tout,
            "cache_tokens": sum(t.cache_write + t.cache_read for t in calls),
            "requests": len(calls),
            "cost": c,
            "balance": -c,
            "daily_used": c,
            "by_model": {model: {"requests": len(calls), "input_tokens": tin, "output_tokens": tout, "cost": c}},
        }
        assert d == want, f"usage moved by {d}, want {want}"

    def expect_nothing(self) -> None:
        d = self.delta()
        assert d == {
            "input_tokens": 0,
            "output_tokens": 0,
            "cache_tokens": 0,
            "requests": 0,
            "cost": 0,
            "balance": 0,
            "daily_used": 0,
            "by_model": {},
        }, f"usage moved by {d} for a call that was not served"
