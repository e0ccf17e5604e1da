"""Fixtures of the SDK conformance suite.

The suite runs under `go test ./test/conformance/`, which starts the whole
gateway (Envoy, the sidecar, Redis, two fake vendors) and passes, in
environment variables, the gateway's URL, the keys of the accounts the cases
use, the fake vendors' control URLs and the prices of the models called.
"""

from __future__ import annotations

import logging
import typing

import anthropic
import openai
import pytest

from gwtest import (
    AlphaClients,
    BetaClients,
    Fake,
    Gateway,
    Meter,
    RecordingTransport,
    _env,
    alpha_client,
    beta_client,
)


def pytest_configure(config: pytest.Config) -> None:
    # Any warning is a failure: a pydantic serialization warning means the
    # SDK's typed object holds a value of the wrong type.
    config.addinivalue_line("filterwarnings", "error")


@pytest.fixture(scope="session")
def gw() -> Gateway:
    return Gateway.from_env()


@pytest.fixture(scope="session")
def fakes() -> typing.Iterator[tuple[Fake, Fake]]:
    pair = Fake(_env("FAKE_PRIMARY_CONTROL")), Fake(_env("FAKE_RESERVE_CONTROL"))
    yield pair
    for f in pair:
        f.close()


@pytest.fixture
def primary(fakes: tuple[Fake, Fake]) -> Fake:
    return fakes[0]


@pytest.fixture(autouse=True)
def _reset_fakes(fakes: tuple[Fake, Fake]) -> typing.Iterator[None]:
    """Every case starts with both fakes' controls and records cleared, and
    leaves no control set for the next."""
    for f in fakes:
        f.reset()
    yield
    for f in fakes:
        f.reset()


@pytest.fixture(autouse=True)
def _no_sdk_log_warnings(caplog: pytest.LogCaptureFixture) -> typing.Iterator[None]:
    """The SDKs report some problems (a reply they could not fully parse,
    a shadowed credential) through their loggers rather than as Python
    warnings; any such record at WARNING or above fails the case."""
    caplog.set_level(logging.WARNING)
    yield
    bad = [
        f"{r.name}: {r.getMessage()}"
        for r in caplog.get_records("call")
        if r.levelno >= logging.WARNING and r.name.split(".")[0] in ("anthropic", "openai", "httpx2", "httpcore2")
    ]
    assert bad == [], bad


@pytest.fixture
def recorder() -> typing.Iterator[RecordingTransport]:
    t = RecordingTransport()
    yield t
    t.close()


@pytest.fixture
def meter(gw: Gateway) -> typing.Iterator[Meter]:
    """Reads the main account's usage before the case; the case checks how
    far its calls moved it."""
    m = Meter(gw)
    yield m
    m.close()


@pytest.fixture
def alpha(gw: Gateway, recorder: RecordingTransport) -> typing.Iterator[AlphaClients]:
    """Makes anthropic clients for {gateway}/alpha (the main account's key
    unless key= is given) that share the case's recorder; closes them after
    the case."""
    clients: list[anthropic.Anthropic] = []

    def make(key: str | None = None, **kw: typing.Any) -> anthropic.Anthropic:
        c = alpha_client(gw, recorder, key, **kw)
        clients.append(c)
        return c

    yield make
    for c in clients:
        c.close()


@pytest.fixture
def beta(gw: Gateway, recorder: RecordingTransport) -> typing.Iterator[BetaClients]:
    """Makes openai clients for {gateway}/beta/v1, like alpha."""
    clients: list[openai.OpenAI] = []

    def make(key: str | None = None, **kw: typing.Any) -> openai.OpenAI:
        c = beta_client(gw, recorder, key, **kw)
        clients.append(c)
        return c

    yield make
    for c in clients:
        c.close()
