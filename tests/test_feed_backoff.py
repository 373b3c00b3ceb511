"""The feed loops' back-off: soon, then less often, and one log line each way."""

from __future__ import annotations

import asyncio
import logging

import pytest

from taskq.feed.backoff import RETRY_FIRST_SECONDS, RETRY_MAX_SECONDS, Backoff


def test_an_outage_doubles_the_pause_to_its_cap_and_is_logged_once_each_way(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    slept: list[float] = []

    async def no_sleep(seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr(asyncio, "sleep", no_sleep)
    backoff = Backoff("feed hub for 'q'")

    async def outage() -> None:
        backoff.succeeded()
        for _ in range(8):
            await backoff.failed(ConnectionError("Redis went away"))
        backoff.succeeded()
        backoff.succeeded()
        await backoff.failed(ConnectionError("again"))

    with caplog.at_level(logging.WARNING, logger="taskq.feed"):
        asyncio.run(outage())
    doubling = [RETRY_FIRST_SECONDS * 2**n for n in range(5)]
    assert slept == [*doubling, RETRY_MAX_SECONDS, RETRY_MAX_SECONDS, RETRY_MAX_SECONDS,
                     RETRY_FIRST_SECONDS]
    assert caplog.messages == ["feed hub for 'q': Redis went away; retrying",
                               "feed hub for 'q': reading again",
                               "feed hub for 'q': again; retrying"]
