"""Renewing many leases in one heartbeat call: fencing per task, one event per renewal."""

from __future__ import annotations

import pytest
import redis

from helpers import assert_refused_unchanged, dump, events, lease_one, overwrite, record_of
from taskq.broker import Broker
from taskq.errors import BrokerError


def hold(broker: Broker, *task_ids: str, seconds: float = 10) -> list[tuple[str, int]]:
    """Enqueue and lease `task_ids`, in that order: their `(task_id, token)` pairs."""
    for task_id in task_ids:
        broker.enqueue(task_id)
    return [lease_one(broker, "w1", seconds) for _ in task_ids]


def evalsha_calls(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


class TestHeartbeatMany:
    def test_every_lease_in_hand_is_renewed_by_one_script_call(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        held = hold(broker, "a", "b", "c", seconds=1)
        before = client.zrange(broker.keys.leased, 0, -1, withscores=True)
        seen = len(events(client, broker.keys))
        broker.heartbeat_many([held[0]], 1)  # the script is loaded: calls counted from here
        calls = evalsha_calls(client)
        assert broker.heartbeat_many(held, 60) == [True, True, True]
        assert evalsha_calls(client) == calls + 1
        after = dict(client.zrange(broker.keys.leased, 0, -1, withscores=True))
        assert all(after[task_id] > score + 50_000 for task_id, score in before)
        renewed = [e for e in events(client, broker.keys, seen) if e.type == "heartbeat"]
        assert [e.task for e in renewed] == ["a", "a", "b", "c"]
        assert record_of(broker, "b").heartbeat_at > 0

    def test_a_stale_pair_is_refused_alone_and_the_others_are_renewed(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        (a, token_a), (b, token_b) = hold(broker, "a", "b")
        seen = len(events(client, broker.keys))
        assert broker.heartbeat_many([(a, token_a + 1), (b, token_b), ("nobody", 1)], 10) \
            == [False, True, False]
        assert [(e.type, e.task) for e in events(client, broker.keys, seen)] \
            == [("heartbeat", "b")]

    def test_a_repeated_pair_is_renewed_once_with_one_event(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        (a, token), = hold(broker, "a")
        seen = len(events(client, broker.keys))
        assert broker.heartbeat_many([(a, token), (a, token), (a, token - 1)], 10) \
            == [True, True, False]
        assert len(events(client, broker.keys, seen)) == 1

    def test_an_events_key_of_another_type_refuses_the_beat_before_any_lease_moves(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        held = hold(broker, "a", "b")
        key = overwrite(client, broker.keys, "events")
        assert_refused_unchanged(client, key, lambda: broker.heartbeat_many(held, 60))
        client.delete(key)
        assert broker.heartbeat_many(held, 60) == [True, True]

    def test_a_record_of_another_type_refuses_the_beat_before_any_lease_moves(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        held = hold(broker, "a", "b")
        client.delete(broker.keys.task("b"))
        client.set(broker.keys.task("b"), "not taskq's")
        before = dump(client)
        with pytest.raises(BrokerError, match="WRONGTYPE"):
            broker.heartbeat_many(held, 60)
        assert dump(client) == before

    def test_nothing_in_hand_sends_nothing(self, broker: Broker, client: redis.Redis) -> None:
        assert broker.heartbeat_many([], 10) == []
        assert dump(client) == {}

    @pytest.mark.parametrize(("lease_ms", "count", "refused"), [
        *((bad, "1", "lease_ms must be a whole number between 1 and 604800000")
          for bad in ("0", "-5", "1.5", "abc", "604800001", "1e300")),
        ("1000", "2", "count must be a whole number between 0 and 1"),  # one pair follows
    ])
    def test_the_script_refuses_a_bad_argument_before_any_write(
        self, broker: Broker, client: redis.Redis, lease_ms: str, count: str, refused: str
    ) -> None:
        (a, token), = hold(broker, "a")
        before = dump(client)
        k = broker.keys
        with pytest.raises(redis.ResponseError, match=refused):
            broker.scripts.heartbeat(keys=[k.leased, k.events, k.seq, k.epoch],
                                     args=[k.prefix, lease_ms, 100, count, a, token])
        assert dump(client) == before

    def test_an_unreachable_redis_is_a_broker_error(self, broker: Broker) -> None:
        gone = Broker(redis.Redis(unix_socket_path="/nonexistent/redis.sock"), "test")
        with pytest.raises(BrokerError, match="renew"):
            gone.heartbeat_many([("a", 1)], 10)
