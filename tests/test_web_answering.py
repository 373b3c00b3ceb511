"""Whether Redis answers, as `taskq serve` judges it: one PING for all who ask at once,
doubt after one that does not come back, and none on a Redis Cluster. The ping here is
a coroutine the test controls; the server's use of it is in test_web_outage."""

from __future__ import annotations

import asyncio

import pytest

from taskq.web import answering
from taskq.web.answering import Answering


class Ping:
    """A PING that answers, fails, or never comes back, counting how often it is sent."""

    def __init__(self) -> None:
        self.sent = 0
        self.reply: str | Exception | None = "PONG"  # None: it never comes back

    async def __call__(self) -> str:
        self.sent += 1
        if self.reply is None:
            await asyncio.Event().wait()
        if isinstance(self.reply, Exception):
            raise self.reply
        return str(self.reply)


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(answering, "ANSWER_SECONDS", 0.05)


def test_a_crowd_asking_at_once_shares_one_ping_and_a_silent_redis_is_doubted() -> None:
    async def scenario() -> None:
        ping = Ping()
        ping.reply = None
        judge = Answering(ping)
        said = await asyncio.gather(*(judge.health() for _ in range(50)))
        assert (set(said), ping.sent, judge.doubted) == ({"not answering"}, 1, True)
        ping.reply = "PONG"
        assert (await judge.health(), judge.doubted) == ("up", False)

    asyncio.run(scenario())


def test_a_refusing_redis_is_down_and_not_doubted() -> None:
    """Refused calls fail at once by themselves: only silence holds threads."""
    async def scenario() -> None:
        ping = Ping()
        ping.reply = ConnectionError("refused")
        judge = Answering(ping)
        assert (await judge.health(), judge.doubted) == ("down", False)

    asyncio.run(scenario())


def test_on_a_cluster_a_silent_node_is_told_but_never_doubted() -> None:
    """A cluster's PING goes to every node: doubted, one silent node would have every
    queue's requests refused."""
    async def scenario() -> None:
        ping = Ping()
        ping.reply = None
        judge = Answering(ping, judges=False)
        assert (await judge.health(), judge.doubted) == ("not answering", False)
        judge.check()  # a slow request asks no PING of its own
        assert ping.sent == 1

    asyncio.run(scenario())


def test_a_slow_request_asks_no_ping_right_after_one_came_back() -> None:
    async def scenario() -> None:
        ping = Ping()
        judge = Answering(ping)
        assert await judge.health() == "up"
        judge.check()
        await asyncio.sleep(0)
        assert ping.sent == 1

    asyncio.run(scenario())
