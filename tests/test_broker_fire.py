"""Broker.fire: a schedule's due ticks become tasks, each tick exactly once, by Redis time."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import assert_refused_unchanged, events, lease_one, leased_token, overwrite
from taskq.broker import Broker
from taskq.errors import ConfigError, InvalidTaskError
from taskq.limits import MAX_DEFINITION_BYTES
from taskq.schedules import Schedule, make_schedule

SECOND = 1000


def every_second(**overrides: Any) -> Schedule:
    options: dict[str, Any] = {"name": "tick", "task": "mod.fn", "cron": None,
                               "every": timedelta(seconds=1), "tz": None, "args": (),
                               "kwargs": {}, "policy": "all",
                               "grace": timedelta(seconds=5), "max_retries": 3}
    options.update(overrides)
    return make_schedule(**options)


def started(broker: Broker, schedule: Schedule, seconds_ago: int) -> int:
    """Fire `schedule` for the first time, then move its start `seconds_ago` back, so
    that many ticks are due; returns the start (ms, a whole second)."""
    assert broker.fire(schedule).definition == "new"
    start = (broker.server_time_ms() // SECOND - seconds_ago) * SECOND
    broker.client.hset(broker.keys.schedules, f"last:{schedule.name}", start)
    return start


def raw_fire(broker: Broker, schedule: Schedule, **overrides: Any) -> Any:
    """Call fire.lua directly with the schedule's arguments, some replaced by name."""
    k = broker.keys
    args = {"prefix": k.prefix, "retention": 1000, "schedule": schedule.name,
            "version": schedule.version, "definition": schedule.definition,
            "name": schedule.task, "payload": schedule.payload,
            "max_retries": schedule.max_retries, "policy": schedule.policy,
            "grace_ms": schedule.grace_ms, "after_ms": 0, "priority": schedule.priority,
            "count": 0, "ticks": []}
    args.update(overrides)
    return broker.scripts.fire(keys=[k.schedules, k.ready, k.events, k.seq, k.epoch, k.wake],
                               args=[*list(args.values())[:-1], *args["ticks"]])


def stored_definition(broker: Broker, name: str) -> dict[str, Any] | None:
    raw = broker.client.hget(broker.keys.schedules, f"definition:{name}")
    return None if raw is None else dict(json.loads(raw))


def due(broker: Broker, schedule: Schedule, after: int) -> list[int]:
    return schedule.ticks(after, broker.server_time_ms(), 1000)


class TestFirstSight:
    def test_a_new_schedule_starts_at_the_server_time_and_fires_nothing(
        self, broker: Broker
    ) -> None:
        fired = broker.fire(every_second(), [1_000, 2_000])
        assert (fired.definition, fired.task_ids) == ("new", ())
        assert fired.last_tick_ms == fired.server_ms
        assert broker.counts().ready == 0


class TestOneTaskPerTick:
    def test_each_due_tick_becomes_one_task_with_the_schedules_call(
        self, broker: Broker
    ) -> None:
        s = every_second(args=(7,))
        start = started(broker, s, 3)
        fired = broker.fire(s, due(broker, s, start))
        assert fired.task_ids == tuple(s.task_id(start + n * SECOND) for n in (1, 2, 3))
        record = broker.task(fired.task_ids[0])
        assert record is not None and record.name == "mod.fn"
        assert broker.payload(fired.task_ids[0]) == {"args": [7], "kwargs": {}}
        assert [e.type for e in events(broker.client, broker.keys)] == ["enqueued"] * 3

    def test_a_ticks_task_has_its_tasks_priority_for_life(self, broker: Broker) -> None:
        s = every_second(priority=9)
        start = started(broker, s, 1)
        broker.enqueue("earlier", priority=6)
        [fired] = broker.fire(s, due(broker, s, start)).task_ids
        got = [lease_one(broker, "w1", 10), lease_one(broker, "w1", 10)]
        assert [task_id for task_id, _ in got] == [fired, "earlier"]
        assert all(leased_token(0, token) for _, token in got)  # each one's first run
        record = broker.task(fired)
        assert record is not None and record.priority == 9
        enqueued = [e for e in events(broker.client, broker.keys) if e.task == fired]
        assert enqueued[0].fields["priority"] == "9"

    def test_a_bad_priority_is_refused_at_declaration(self) -> None:
        with pytest.raises(ConfigError, match="priority"):
            every_second(priority=10)

    def test_two_brokers_firing_the_same_tick_make_one_task(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        other = Broker(client, broker.queue)
        s = every_second()
        start = started(broker, s, 1)
        ticks = due(broker, s, start)
        first, second = broker.fire(s, ticks), other.fire(s, ticks)
        assert len(first.task_ids) == 1 and second.task_ids == ()
        assert broker.counts().ready == 1

    def test_a_tick_already_handled_is_refused_even_if_its_task_is_gone(
        self, broker: Broker
    ) -> None:
        s = every_second()
        start = started(broker, s, 1)
        (task_id,) = broker.fire(s, due(broker, s, start)).task_ids
        broker.client.delete(broker.keys.task(task_id), broker.keys.ready)
        assert broker.fire(s, [start + SECOND]).task_ids == ()

    def test_a_tick_whose_task_is_still_there_is_not_made_again_if_its_last_tick_went_back(
        self, broker: Broker
    ) -> None:
        """The record of the last tick, set back by hand, would let the tick fire again:
        its task, already running, must keep its place and its token."""
        s = every_second()
        start = started(broker, s, 1)
        (task_id,) = broker.fire(s, due(broker, s, start)).task_ids
        (leased,) = broker.lease_many("w", 30, 1).tasks
        broker.client.hset(broker.keys.schedules, f"last:{s.name}", start)
        assert broker.fire(s, [start + SECOND]).task_ids == ()
        record = broker.task(task_id)
        assert record is not None
        assert (record.state, record.fencing_token) == ("running", leased.token)
        assert broker.counts().ready == 0

    def test_a_tick_the_server_clock_has_not_reached_is_not_fired(self, broker: Broker) -> None:
        s = every_second()
        start = started(broker, s, 0)
        ahead = broker.server_time_ms() // SECOND * SECOND + 60 * SECOND
        fired = broker.fire(s, [ahead])
        assert fired.task_ids == () and fired.last_tick_ms == start
        assert broker.fire(s, [ahead]).task_ids == ()

    def test_bad_arguments_are_refused_before_any_write(self, broker: Broker) -> None:
        s = every_second()
        started(broker, s, 2)
        before = broker.client.hgetall(broker.keys.schedules)
        with pytest.raises(redis.ResponseError, match="strictly ascending"):
            raw_fire(broker, s, count=2, ticks=[2000, 1000])
        with pytest.raises(redis.ResponseError, match="policy must be all, latest or skip"):
            raw_fire(broker, s, policy="sometimes")
        assert broker.client.hgetall(broker.keys.schedules) == before

    def test_a_caller_that_saw_more_than_redis_kept_fires_nothing_and_learns_the_last(
        self, broker: Broker
    ) -> None:
        # A failover lost the write of ticks 2 and 3, which this caller saw: proposing
        # from 3 would pass ticks 2 and 3 over for good.
        s = every_second()
        start = started(broker, s, 4)
        stale = broker.fire(s, [start + 4 * SECOND], after_ms=start + 3 * SECOND)
        assert stale.task_ids == () and stale.last_tick_ms == start
        fired = broker.fire(s, due(broker, s, stale.last_tick_ms), stale.last_tick_ms)
        assert len(fired.task_ids) == 4


class TestPolicies:
    def test_all_runs_every_missed_tick(self, broker: Broker) -> None:
        s = every_second(policy="all")
        start = started(broker, s, 5)
        assert len(broker.fire(s, due(broker, s, start)).task_ids) == 5

    def test_latest_runs_only_the_latest_missed_tick(self, broker: Broker) -> None:
        s = every_second(policy="latest")
        start = started(broker, s, 5)
        ticks = due(broker, s, start)
        fired = broker.fire(s, ticks)
        assert fired.task_ids == (s.task_id(ticks[-1]),)
        assert fired.last_tick_ms == ticks[-1]

    def test_skip_runs_a_tick_within_its_grace(self, broker: Broker) -> None:
        s = every_second(policy="skip", grace=timedelta(seconds=5))
        start = started(broker, s, 3)
        assert len(broker.fire(s, due(broker, s, start)).task_ids) == 1

    def test_skip_drops_a_tick_later_than_its_grace_and_moves_past_it(
        self, broker: Broker
    ) -> None:
        s = every_second(policy="skip", grace=timedelta(seconds=1))
        start = started(broker, s, 5)
        old = [start + SECOND, start + 2 * SECOND]  # 3 s late and more
        fired = broker.fire(s, old)
        assert fired.task_ids == () and fired.last_tick_ms == old[-1]


    def test_skip_drops_a_tick_late_by_more_than_its_grace_though_less_than_twice_it(
        self, broker: Broker
    ) -> None:
        s = every_second(policy="skip", grace=timedelta(seconds=2))
        start = started(broker, s, 5)
        fired = broker.fire(s, [start + 2 * SECOND])  # 3 to 4 s late
        assert fired.task_ids == () and fired.last_tick_ms == start + 2 * SECOND


class TestDefinitionChange:
    def test_a_changed_definition_replaces_the_old_keeping_its_last_tick(
        self, broker: Broker
    ) -> None:
        old = every_second()
        start = started(broker, old, 2)
        first = broker.fire(old, due(broker, old, start))
        new = every_second(args=(1,), every=timedelta(milliseconds=500))
        assert new.version != old.version
        replaced = broker.fire(new, new.ticks(start, first.last_tick_ms, 100))
        assert (replaced.definition, replaced.task_ids) == ("replaced", ())
        assert replaced.last_tick_ms == first.last_tick_ms
        assert broker.schedule_state("tick") == (first.last_tick_ms, new.version)
        assert broker.fire(new, []).definition == "same"


class TestStoredDefinition:
    def test_a_new_schedule_keeps_its_definition_beside_its_version(
        self, broker: Broker
    ) -> None:
        s = every_second(policy="skip", max_retries=2)
        broker.fire(s)
        assert stored_definition(broker, "tick") == {
            "version": s.version, "task": "mod.fn", "cron": None, "tz": None,
            "every_ms": 1000, "policy": "skip", "grace_ms": 5000, "max_retries": 2,
            "priority": 5}

    def test_a_replaced_schedule_replaces_its_definition_in_the_same_step(
        self, broker: Broker
    ) -> None:
        broker.fire(every_second())
        new = every_second(cron="*/5 * * * *", every=None, tz="Europe/Paris")
        assert broker.fire(new).definition == "replaced"
        described = stored_definition(broker, "tick")
        assert described is not None
        assert (described["version"], described["cron"], described["tz"],
                described["every_ms"]) == (new.version, "*/5 * * * *", "Europe/Paris", None)

    def test_a_schedule_kept_without_a_definition_gets_it_at_its_next_firing(
        self, broker: Broker
    ) -> None:
        # As a taskq that kept no definitions left it: the same version, none beside it.
        s = every_second()
        broker.fire(s)
        broker.client.hdel(broker.keys.schedules, "definition:tick")
        assert broker.fire(s).definition == "same"
        assert stored_definition(broker, "tick") == json.loads(s.definition)

    def test_a_definition_other_than_the_fired_one_is_rewritten(self, broker: Broker) -> None:
        s = every_second()
        broker.fire(s)
        broker.client.hset(broker.keys.schedules, "definition:tick", '{"version":"other"}')
        broker.fire(s)
        assert stored_definition(broker, "tick") == json.loads(s.definition)

    @pytest.mark.parametrize("definition", [
        "", "{", "[]", '"text"', '{"version":"not-this-one"}', "{}",
        '{"version":"%s","pad":"' + "x" * MAX_DEFINITION_BYTES + '"}',
    ])  # fmt: skip
    def test_a_definition_not_of_the_fired_version_is_refused_before_any_write(
        self, broker: Broker, definition: str
    ) -> None:
        s = every_second()
        started(broker, s, 2)
        before = broker.client.hgetall(broker.keys.schedules)
        with pytest.raises(redis.ResponseError, match="definition must be a JSON object"):
            raw_fire(broker, s, definition=definition.replace("%s", s.version))
        assert broker.client.hgetall(broker.keys.schedules) == before

    def test_broker_fire_refuses_a_definition_too_long_to_keep(self, broker: Broker) -> None:
        long = dataclasses.replace(every_second(), task="t" * MAX_DEFINITION_BYTES)
        with pytest.raises(InvalidTaskError, match="definition is over 4096 bytes"):
            broker.fire(long)
        assert broker.client.exists(broker.keys.schedules) == 0


class TestManyFirers:
    @settings(max_examples=25, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(plan=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 10)), min_size=1,
                         max_size=30),
           policy=st.sampled_from(["all", "latest", "skip"]))
    def test_firers_with_stale_views_make_one_task_per_tick_in_any_interleaving(
        self, client: redis.Redis, plan: list[tuple[int, int]], policy: str
    ) -> None:
        client.flushall()
        firers = [Broker(client, "test") for _ in range(3)]
        s = every_second(policy=policy, grace=timedelta(hours=1))
        start = started(firers[0], s, 10)
        # What each firer last heard of the schedule's last tick: stale for all but the
        # one that fired last, as with workers that each cache their own reply.
        seen = [start] * 3
        made: list[str] = []
        for who, upto in plan:
            fired = firers[who].fire(s, s.ticks(seen[who], start + upto * SECOND, 100),
                                     seen[who])
            seen[who] = fired.last_tick_ms
            made.extend(fired.task_ids)
        assert len(made) == len(set(made)) == firers[0].counts().ready
        ticks = sorted(int(task_id.rsplit(":", 1)[1]) for task_id in made)
        reached = max(upto for _, upto in plan)
        if policy == "all":
            assert ticks == [start + n * SECOND for n in range(1, reached + 1)]
        else:
            assert set(ticks) <= {start + n * SECOND for n in range(1, reached + 1)}
            assert (not ticks) == (reached == 0)


class TestForget:
    def test_forget_removes_the_record_and_leaves_the_tasks_its_ticks_made(
        self, broker: Broker
    ) -> None:
        s = every_second()
        start = started(broker, s, 3)
        made = broker.fire(s, due(broker, s, start), start).task_ids
        assert len(made) == 3
        done = broker.forget_schedule(s.name)
        assert (done.outcome, done.last_tick) == ("forgotten", str(start + 3 * SECOND))
        assert broker.client.hgetall(broker.keys.schedules) == {}
        assert broker.schedule_state(s.name) is None
        assert broker.counts().ready == 3
        assert all(broker.task(task_id) is not None for task_id in made)

    def test_a_forgotten_schedule_fired_again_starts_now_and_never_makes_a_tick_twice(
        self, broker: Broker
    ) -> None:
        s = every_second()
        start = started(broker, s, 3)
        made = broker.fire(s, due(broker, s, start), start).task_ids
        broker.forget_schedule(s.name)
        # A firer that restarted proposes every tick from the epoch's first on.
        again = broker.fire(s, due(broker, s, start - 10 * SECOND), 0)
        assert (again.definition, again.task_ids) == ("new", ())
        assert again.last_tick_ms == again.server_ms
        assert broker.fire(s, due(broker, s, start), again.last_tick_ms).task_ids == ()
        assert broker.counts().ready == len(made) == 3

    def test_forget_keeps_a_schedule_fired_since_the_tick_the_caller_read(
        self, broker: Broker
    ) -> None:
        s = every_second()
        start = started(broker, s, 2)
        fired = broker.fire(s, due(broker, s, start), start)
        done = broker.forget_schedule(s.name, start)
        assert (done.outcome, done.last_tick) == ("fired", str(fired.last_tick_ms))
        assert broker.schedule_state(s.name) == (fired.last_tick_ms, s.version)
        assert broker.forget_schedule(s.name, fired.last_tick_ms).outcome == "forgotten"
        assert broker.forget_schedule(s.name).outcome == "missing"

    def test_forget_leaves_every_other_schedule_alone(self, broker: Broker) -> None:
        keep, drop = every_second(name="keep"), every_second(name="drop")
        broker.fire(keep)
        broker.fire(drop)
        broker.forget_schedule("drop")
        assert broker.schedule_state("drop") is None
        assert broker.schedule_state("keep") is not None
        assert stored_definition(broker, "keep") is not None

    @pytest.mark.parametrize("name", ["", "a b", "x" * 101, 7, None])
    def test_a_name_no_schedule_can_bear_is_refused(self, broker: Broker, name: Any) -> None:
        with pytest.raises(InvalidTaskError, match="invalid schedule name"):
            broker.forget_schedule(name)

    @pytest.mark.parametrize("tick", [-1, 10**13 + 1, 1.5, True, "5"])
    def test_a_tick_that_is_no_whole_ms_is_refused(self, broker: Broker, tick: Any) -> None:
        broker.fire(every_second())
        with pytest.raises(InvalidTaskError, match="last_tick_ms must be a whole number"):
            broker.forget_schedule("tick", tick)
        assert broker.schedule_state("tick") is not None

    @pytest.mark.parametrize(("args", "error"), [
        (["", ""], "schedule must be a name of 1 to 100 bytes"),
        (["x" * 101, ""], "schedule must be a name of 1 to 100 bytes"),
        (["tick", "-1"], "last_ms must be a whole number"),
        (["tick", "1e3"], "last_ms must be a whole number"),
        (["tick", "10000000000001"], "last_ms must be a whole number"),
    ])  # fmt: skip
    def test_the_script_refuses_bad_arguments_before_any_write(
        self, broker: Broker, args: list[str], error: str
    ) -> None:
        broker.fire(every_second())
        with pytest.raises(redis.ResponseError, match=error):
            broker.scripts.forget_schedule(keys=[broker.keys.schedules], args=args)
        assert broker.schedule_state("tick") is not None

    def test_a_last_tick_written_by_hand_is_forgotten_only_unconditionally(
        self, broker: Broker
    ) -> None:
        broker.fire(every_second())
        broker.client.hset(broker.keys.schedules, "last:tick", "garbage")
        assert broker.forget_schedule("tick", 0).outcome == "fired"
        assert broker.forget_schedule("tick").outcome == "forgotten"

    @settings(max_examples=25, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(plan=st.lists(st.tuples(st.sampled_from(["fire", "crash", "forget"]),
                                   st.integers(0, 2), st.integers(0, 10)),
                         min_size=1, max_size=30))
    def test_firers_forgets_and_restarts_in_any_interleaving_never_make_a_tick_twice(
        self, client: redis.Redis, plan: list[tuple[str, int, int]]
    ) -> None:
        """PeriodicTick_Forget on the real scripts: three firers with views of their own,
        restarts (a view of 0) and forgets (of the last tick a firer read) interleaved."""
        client.flushall()
        firers = [Broker(client, "test") for _ in range(3)]
        s = every_second(grace=timedelta(hours=1))
        start = started(firers[0], s, 10)
        seen = [start] * 3
        made: list[int] = []
        forgotten = False
        for action, who, upto in plan:
            if action == "crash":
                seen[who] = 0
            elif action == "forget":
                forgotten |= firers[who].forget_schedule(s.name, seen[who]).outcome == "forgotten"
            else:
                proposed = s.ticks(max(seen[who], start - 10 * SECOND), start + upto * SECOND, 100)
                fired = firers[who].fire(s, proposed, seen[who])
                seen[who] = fired.last_tick_ms
                made.extend(int(t.rsplit(":", 1)[1]) for t in fired.task_ids)
        assert len(made) == len(set(made)) == firers[0].counts().ready  # OneTaskPerTick
        # NoLostTick: while the record lives, its ticks are made in order, none skipped.
        assert made == [start + n * SECOND for n in range(1, len(made) + 1)]
        state = firers[0].schedule_state(s.name)
        if state is not None and state[0] <= start + 10 * SECOND:  # not restarted at now
            assert state[0] == (made[-1] if made else start)
        assert forgotten or state is not None


@pytest.mark.parametrize(("written", "priority"), [
    ("ready", 5), ("ready:9", 9), ("ready:levels", 9), ("events", 5)])
def test_a_place_of_another_type_fires_nothing_and_a_later_call_fires_the_tick(
    broker: Broker, written: str, priority: int
) -> None:
    """The tick is not marked handled while its task cannot be placed: once the key is
    mended, the same tick fires."""
    schedule = every_second(priority=priority)
    tick = [started(broker, schedule, seconds_ago=2) + SECOND]
    key = overwrite(broker.client, broker.keys, written)
    assert_refused_unchanged(broker.client, key, lambda: broker.fire(schedule, tick))
    broker.client.delete(key)
    assert len(broker.fire(schedule, tick).task_ids) == 1


def test_a_schedules_hash_of_another_type_fires_nothing_and_once_mended_the_tick_fires(
    broker: Broker,
) -> None:
    """Refused by taskq, naming the key, not by Redis part way: a worker then holds the
    schedule back and asks again, where a raw WRONGTYPE stopped its whole upkeep."""
    schedule = every_second()
    tick = [started(broker, schedule, seconds_ago=2) + SECOND]
    key = broker.keys.schedules
    saved = broker.client.dump(key)
    assert saved is not None
    overwrite(broker.client, broker.keys, "schedules")
    assert_refused_unchanged(broker.client, key, lambda: broker.fire(schedule, tick))
    broker.client.delete(key)
    broker.client.restore(key, 0, saved)
    assert len(broker.fire(schedule, tick).task_ids) == 1
