"""A worker on several queues: the `--queue` option, and the order it leases them in."""

from __future__ import annotations

import pytest
import redis

from taskq.broker import Broker
from taskq.errors import ConfigError
from taskq.worker.queues import Queues, parse_queues


class TestTheQueueOption:
    @pytest.mark.parametrize(("text", "parsed"), [
        ("default", ["default"]),
        ("high,default,low", ["high", "default", "low"]),
        (" high , low ", ["high", "low"]),
        ("high:3,default:1", {"high": 3, "default": 1}),
        ("high:3,low", {"high": 3, "low": 1}),
    ])
    def test_names_are_strict_and_weights_make_it_weighted(
        self, text: str, parsed: object
    ) -> None:
        assert parse_queues(text) == parsed

    @pytest.mark.parametrize(("text", "says"), [
        ("high,,low", "invalid queue name ''"),
        ("high:0,low", "the weight of 'high' must be a whole number between 1 and 1000"),
        ("high:x", "the weight of 'high' must be"),
        ("high:-1", "the weight of 'high' must be"),
        ("high:1001", "not 1001"),
        ("high:2,high:1", "names a queue twice"),
        ("bad name", "invalid queue name"),
    ])
    def test_a_value_taskq_cannot_use_is_refused_naming_the_option(
        self, text: str, says: str
    ) -> None:
        with pytest.raises(ConfigError, match=r"^--queue ") as refused:
            parse_queues(text)
        assert says in str(refused.value)


class TestOrder:
    def brokers(self, client: redis.Redis, *names: str) -> list[Broker]:
        return [Broker(client, name) for name in names]

    def test_strict_order_is_the_order_given_every_turn(self, client: redis.Redis) -> None:
        queues = Queues(self.brokers(client, "high", "default", "low"))
        for _ in range(5):
            assert [b.queue for b in queues.order()] == ["high", "default", "low"]

    def test_weights_pick_the_first_queue_in_proportion_and_starve_none(
        self, client: redis.Redis
    ) -> None:
        queues = Queues(self.brokers(client, "high", "default", "low"), [5, 2, 1])
        orders = [[b.queue for b in queues.order()] for _ in range(800)]
        firsts = [order[0] for order in orders]
        assert [firsts.count(q) for q in ("high", "default", "low")] == [500, 200, 100]
        # Spread out, not in runs: every queue goes first within each stretch of 8 turns.
        for start in range(0, 800, 8):
            assert set(firsts[start:start + 8]) == {"high", "default", "low"}
        # After the first, the others in the order given.
        assert {tuple(o) for o in orders} == {("high", "default", "low"),
                                              ("default", "high", "low"),
                                              ("low", "high", "default")}

    @pytest.mark.parametrize(("names", "weights", "says"), [
        ((), None, "at least one queue"),
        (("a", "a"), None, "must differ"),
        (("a", "b"), [1], "1 weights for 2 queues"),
        (("a", "b"), [1, 0], "the weight of queue 'b'"),
        (("a", "b"), [1, True], "the weight of queue 'b'"),
    ])
    def test_a_set_of_queues_taskq_cannot_use_is_refused(
        self, client: redis.Redis, names: tuple[str, ...], weights: list[int] | None,
        says: str
    ) -> None:
        with pytest.raises(ConfigError, match=says):
            Queues(self.brokers(client, *names), weights)

    def test_the_queues_must_share_one_client(self, client: redis.Redis) -> None:
        elsewhere = redis.Redis(connection_pool=client.connection_pool)
        with pytest.raises(ConfigError, match="share one Redis client"):
            Queues([Broker(client, "a"), Broker(elsewhere, "b")])
