"""Refusals through the official SDKs at their default settings.

A refusal a client cannot wait out (a daily or monthly budget, a key's
lifetime budget, the balance, a request whose token bound alone exceeds the
tokens-per-minute limit) carries `x-should-retry: false` and no
`retry-after`, so each SDK, with its default retries, raises at once: the
call returns an error within a second (issue #33's acceptance, a bound on
client behaviour, not a performance figure), after one attempt, and the
message names the limit. A request-rate refusal carries `retry-after` and
may be retried by the SDK (the pinned SDKs wait out any retry-after); it is
the SDK's RateLimitError.

The keys are made by conformance_test.go (refusalKeys): one account each,
refused on the first request by the limit of its kind.
"""

from __future__ import annotations

import json
import re
import time
from datetime import datetime, timezone

import anthropic
import httpx2
import openai
import pytest

from gwtest import ALPHA_MODEL, BETA_MODEL, AlphaClients, BetaClients, Fake, Gateway, RecordingTransport, _env

PROMPT = "Hello there, gateway"

# What each refusal's message must name, as case-insensitive regular
# expressions: the limit, its level, and the figures today's messages
# carry. Extend a kind's list as messages gain amounts (the limit, what is
# used of it); every pattern must match.
MESSAGE_NAMES: dict[str, list[str]] = {
    "daily": [r"daily spend limit", r"\baccount\b", r"\$\d+\.\d{2,9} of \$\d+\.\d{2,9} used, \$\d+\.\d{2,9} held by requests in flight", r"could cost up to \$\d+\.\d{2,9}"],
    "monthly": [r"monthly spend limit", r"\bkey\b", r"\$\d+\.\d{2,9} of \$\d+\.\d{2,9} used, \$\d+\.\d{2,9} held by requests in flight", r"could cost up to \$\d+\.\d{2,9}"],
    "lifetime": [r"lifetime spend limit", r"\bkey\b", r"\$\d+\.\d{2,9} of \$\d+\.\d{2,9} used, \$\d+\.\d{2,9} held by requests in flight", r"could cost up to \$\d+\.\d{2,9}"],
    "balance": [r"balance is \$-?\d+\.\d{2,9}", r"held by requests in flight", r"could cost up to \$\d+\.\d{2,9}"],
    "tpm": [r"tokens-per-minute limit", r"\bkey\b", r"up to \d+ tokens", r"allows at all \(\d+\)"],
}

# kind -> (HTTP status, the anthropic SDK's class, the openai SDK's class,
# whether the limit resets and says when in x-gateway-limit-reset).
KINDS: dict[str, tuple[int, type, type, bool]] = {
    "daily": (429, anthropic.RateLimitError, openai.RateLimitError, True),
    "monthly": (429, anthropic.RateLimitError, openai.RateLimitError, True),
    "lifetime": (402, anthropic.PaymentRequiredError, openai.APIStatusError, False),
    "balance": (402, anthropic.PaymentRequiredError, openai.APIStatusError, False),
    "tpm": (429, anthropic.RateLimitError, openai.RateLimitError, False),
}

# The bound on how long a client waits for a refusal it cannot
# wait out.
WITHIN_S = 1.0


@pytest.fixture(scope="module")
def keys() -> dict[str, str]:
    return json.loads(_env("GATEWAY_REFUSAL_KEYS"))


def call(sdk: str, alpha: AlphaClients, beta: BetaClients, key: str, **client: object) -> None:
    """One request with a client at the SDK's default settings (default
    max_retries and timeout) unless client says otherwise; max_tokens 1,024
    exceeds the tpm key's limit of 100 tokens by itself."""
    if sdk == "anthropic":
        alpha(key=key, **client).messages.create(
            model=ALPHA_MODEL, max_tokens=1024, messages=[{"role": "user", "content": PROMPT}]
        )
    else:
        beta(key=key, **client).chat.completions.create(
            model=BETA_MODEL, max_tokens=1024, messages=[{"role": "user", "content": PROMPT}]
        )


def error_message(err: anthropic.APIStatusError | openai.APIStatusError) -> str:
    """The message of the vendor-format error body: both formats put it at
    error.message."""
    return err.response.json()["error"]["message"]


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("sdk", ["anthropic", "openai"])
def test_refusal_is_final_within_a_second(
    sdk: str,
    kind: str,
    keys: dict[str, str],
    alpha: AlphaClients,
    beta: BetaClients,
    recorder: RecordingTransport,
    primary: Fake,
) -> None:
    status, alpha_cls, beta_cls, resets = KINDS[kind]
    cls = alpha_cls if sdk == "anthropic" else beta_cls
    t0 = time.monotonic()
    with pytest.raises(cls) as e:
        call(sdk, alpha, beta, keys[kind])
    elapsed = time.monotonic() - t0
    print(f"refusal {sdk} {kind}: {status} raised after {elapsed * 1000:.0f} ms")
    assert elapsed < WITHIN_S, f"{sdk} took {elapsed:.3f}s to raise on a {kind} refusal"
    err = e.value
    assert err.status_code == status, err.response.text
    # One attempt: the SDK obeyed x-should-retry instead of backing off.
    assert [x.status for x in recorder.exchanges] == [status]
    h = err.response.headers
    assert h.get("x-should-retry") == "false", dict(h)
    assert "retry-after" not in h and "retry-after-ms" not in h, dict(h)
    if resets:
        at = datetime.fromisoformat(h["x-gateway-limit-reset"].replace("Z", "+00:00"))
        assert at > datetime.now(timezone.utc), h["x-gateway-limit-reset"]
    else:
        assert "x-gateway-limit-reset" not in h, dict(h)
    msg = error_message(err)
    missing = [p for p in MESSAGE_NAMES[kind] if not re.search(p, msg, re.IGNORECASE)]
    assert missing == [], f"the {kind} refusal's message {msg!r} does not match {missing}"
    # Refused before the vendor: nothing reached it.
    assert primary.requests("messages", "/v1/messages") == []
    assert primary.requests("chat_completions", "/v1/chat/completions") == []


@pytest.mark.parametrize("sdk", ["anthropic", "openai"])
def test_refusal_by_request_rate_is_rate_limit_error(
    sdk: str,
    keys: dict[str, str],
    gw: Gateway,
    alpha: AlphaClients,
    beta: BetaClients,
    recorder: RecordingTransport,
) -> None:
    """For contrast: a request-rate refusal that clears within a minute
    says when to retry (retry-after of at most 60 s, no x-should-retry:
    false), so an SDK at its defaults retries it; the pinned SDKs wait out
    any retry-after, so this case turns the SDK's retries off and checks
    what it raises and what the refusal tells it. (A window that clears
    later is final, like a budget.) No time bound."""
    key = keys["rpm_" + ("alpha" if sdk == "anthropic" else "beta")]
    # Fill the key's window (1 a minute over 1 minute: 1 request).
    with httpx2.Client(trust_env=False, timeout=10) as h:
        for _ in range(1):
            r = h.post(
                f"{gw.url}/alpha/v1/messages",
                headers={"x-api-key": key, "anthropic-version": "2023-06-01"},
                json={"model": ALPHA_MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": PROMPT}]},
            )
            assert r.status_code == 200, r.text
    with pytest.raises(anthropic.RateLimitError if sdk == "anthropic" else openai.RateLimitError) as e:
        call(sdk, alpha, beta, key, max_retries=0)
    assert e.value.status_code == 429
    msg = error_message(e.value)
    assert re.search(r"request rate limit", msg, re.IGNORECASE), msg
    h = e.value.response.headers
    assert h.get("x-should-retry") is None, dict(h)
    assert 0 < int(h["retry-after"]) <= 60, dict(h)
    assert [x.status for x in recorder.exchanges] == [429]
