"""Rate limits: declared and checked (taskq.rates), kept by lease.lua for every worker at
once: a task that comes before its slot waits on delayed for it, keeping it."""

from __future__ import annotations

import itertools
import math
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from conftest import ON_CLUSTER
from helpers import (
    Event,
    assert_refused_unchanged,
    assert_refused_while_overwritten,
    events,
    no_ghost_slots,
    record_of,
    wait_past,
)
from taskq import App, registry
from taskq.broker import Broker, NewTask
from taskq.errors import BrokerError, ConfigError, InvalidTaskError
from taskq.rates import QUEUE_LIMIT, RateLimit, parse_rate, spacing_text
from taskq.registry import Presence
from taskq.results import HeldLimit, Lifted
from taskq.settings import Settings
from taskq.snapshot import take_snapshot
from waiting import WorkerProcesses, pid_of, wait_until, worker_env

pytestmark = pytest.mark.processes


class TestDeclaration:
    @pytest.mark.parametrize(("text", "per_second"), [("100/s", 100.0), ("30/m", 0.5),
                                                      ("7200/h", 2.0), (" 2.5 / s ", 2.5)])
    def test_a_rate_is_read_per_second(self, text: str, per_second: float) -> None:
        assert parse_rate("t", text).per_second == per_second

    @pytest.mark.parametrize(("text", "interval_us"), [
        ("3/s", 333_334), ("7/s", 142_858), ("100/s", 10_000), ("1/h", 3_600_000_000),
        ("500/h", 7_200_000), ("1000000/s", 1)])
    def test_a_spacing_is_rounded_up_so_no_window_holds_a_start_too_many(
        self, text: str, interval_us: int
    ) -> None:
        # At 333,333 us a window of 999,999 us would hold four starts of "3/s" (B = 1).
        assert parse_rate("t", text).interval_us == interval_us

    @pytest.mark.parametrize("text", ["100", "100/d", "fast", "-1/s", "0/s", "2000000/s",
                                      None, 5])
    def test_a_rate_taskq_cannot_keep_is_refused_naming_the_task(self, text: object) -> None:
        with pytest.raises(ConfigError, match=r"task 'mail\.send': rate_limit"):
            parse_rate("mail.send", text)

    @pytest.mark.parametrize("text", ["\u0661\u0660/s", "\uff11\uff10/s"])
    def test_digits_of_other_scripts_are_refused(self, text: str) -> None:
        with pytest.raises(ConfigError, match="rate_limit must look like"):
            parse_rate("t", text)

    def test_a_huge_rate_is_shown_shortened_in_its_error(self) -> None:
        with pytest.raises(ConfigError, match="outside what taskq supports") as refused:
            parse_rate("t", "1" * 5000 + "/s")
        assert len(str(refused.value)) < 300

    @pytest.mark.parametrize("burst", [0, 10_001, 1.5, True])
    def test_a_burst_outside_its_range_is_refused(self, burst: object) -> None:
        with pytest.raises(ConfigError, match="rate_burst"):
            parse_rate("t", "1/s", burst)

    @pytest.mark.parametrize(("per_second", "burst", "wrong"), [
        (-5.0, 1, "per_second"), (0.0, 1, "per_second"), (math.nan, 1, "per_second"),
        (math.inf, 1, "per_second"), (1e308, 1, "per_second"), (1e-308, 1, "per_second"),
        (True, 1, "per_second"), ("3", 1, "per_second"), (10**400, 1, "per_second"),
        (1.0, 0, "burst"),
        (1.0, 2.0, "burst")])
    def test_a_limit_made_by_hand_that_taskq_cannot_keep_is_refused_as_made(
        self, per_second: object, burst: object, wrong: str
    ) -> None:
        """As a broker's `rate_limits` may be set: a negative rate ran a million a second,
        others failed each lease with a bare Python error."""
        with pytest.raises(ConfigError, match=f"task 'mail.send': {wrong} must be"):
            RateLimit("mail.send", per_second, burst)  # type: ignore[arg-type]

    @pytest.mark.parametrize(("text", "burst", "shown"), [
        ("20/s", 1, "20/s, burst 1"), ("1000000/s", 2, "1,000,000/s, burst 2"),
        ("30/m", 1, "30/m, burst 1"), ("1/h", 3, "1/h, burst 3"), ("500/h", 1, "8.33/m, burst 1"),
        ("3/s", 1, "3/s, burst 1")])
    def test_a_stored_spacing_reads_as_the_rate_it_keeps(
        self, text: str, burst: int, shown: str
    ) -> None:
        limit = parse_rate("t", text, burst)
        assert spacing_text(limit.interval_us, limit.burst) == shown

    def test_the_apps_limits_are_those_of_its_tasks(self, app: App) -> None:
        app.task("limited", rate_limit="10/s", rate_burst=3)(lambda: None)
        app.task("free")(lambda: None)
        assert app.rate_limits() == (RateLimit("limited", 10.0, 3),)

    def test_the_limits_a_worker_lifts_are_its_free_tasks_and_a_queue_without_one(
        self, app: App
    ) -> None:
        app.task("limited", rate_limit="10/s")(lambda: None)
        app.task("free")(lambda: None)
        app.task("also.free")(lambda: None)
        assert app.unlimited_rates() == ("also.free", "free", QUEUE_LIMIT)
        app.queue_rate_limit("5/s")
        assert app.unlimited_rates() == ("also.free", "free")
        assert app.unlimited_rates("other") == ("also.free", "free", QUEUE_LIMIT)


def limited(broker: Broker, per_second: float, burst: int = 1) -> Broker:
    broker.rate_limits = (RateLimit("slow", per_second, burst),)
    return broker


def leased(broker: Broker, count: int = 100) -> list[str]:
    return [t.task_id for t in broker.lease_many("w", 30, count).tasks]


def throttled_then_undeclared(broker: Broker, ids: str) -> None:
    """A limit of one an hour on "slow" starts the first of `ids` (tasks of that name)
    and throttles the rest; then a redeploy declares no limit any more."""
    limited(broker, 1 / 3600)
    broker.enqueue_many([NewTask(task_id, name="slow") for task_id in ids])
    assert leased(broker) == [ids[0]]
    broker.rate_limits = ()


class TestLease:
    @pytest.mark.parametrize("written", ["reserved", "released", "rates"])
    def test_a_limit_key_of_another_type_refuses_it_before_any_task_leaves_ready(
        self, broker: Broker, written: str
    ) -> None:
        limited(broker, 1 / 3600)
        broker.enqueue_many([NewTask(task_id, name="slow") for task_id in "zy"])
        key = {"reserved": broker.keys.reserved("slow"), "rates": broker.keys.rates,
               "released": f"{broker.keys.prefix}released:slow"}[written]
        broker.client.set(key, "not taskq's")
        assert_refused_unchanged(broker.client, key, lambda: leased(broker))
        broker.client.delete(key)
        assert leased(broker) == ["z"]
        assert list(reserved(broker)) == ["y"]

    def test_starts_beyond_the_limit_wait_on_delayed_each_for_its_own_slot(
        self, broker: Broker
    ) -> None:
        limited(broker, 10)  # a slot every 100 ms
        broker.enqueue_many([NewTask(f"s{i}", name="slow") for i in range(4)])
        assert leased(broker) == ["s0"]
        slots = sorted(record_of(broker, f"s{i}").run_at for i in range(1, 4))
        assert [b - a for a, b in itertools.pairwise(slots)] == [100, 100]
        assert broker.counts().delayed == 3
        throttled = [e for e in events(broker.client, broker.keys) if e.type == "throttled"]
        assert [(e.task, e.state) for e in throttled] == [(f"s{i}", "delayed") for i in (1, 2, 3)]

    def test_one_lease_passes_over_at_most_a_thousand_waiting_tasks(
        self, broker: Broker
    ) -> None:
        limited(broker, 1 / 3600)
        broker.enqueue_many([NewTask(f"s{i}", name="slow") for i in range(2500)])
        assert leased(broker, count=2500) == ["s0"]
        # The rest waits in ready for the next call, rather than one call throttling
        # every one of them.
        assert broker.counts().delayed == 1000
        assert broker.counts().ready == 1499

    def test_a_raised_limit_holds_new_starts_back_at_its_own_spacing(
        self, broker: Broker
    ) -> None:
        limited(broker, 1 / 3600)
        broker.enqueue_many([NewTask(f"s{i}", name="slow") for i in range(5)])
        assert leased(broker) == ["s0"]  # four throttled, the last four hours out
        limited(broker, 100)  # redeployed at a hundred a second
        broker.enqueue("new", name="slow")
        assert leased(broker) == []
        # Behind the four slots already handed out, at the new spacing: 50 ms, not 5 h.
        wait_ms = record_of(broker, "new").run_at - broker.server_time_ms()
        assert 0 < wait_ms <= 60

    def test_a_raised_limit_makes_the_tasks_waiting_at_the_old_spacing_due_now(
        self, broker: Broker
    ) -> None:
        limited(broker, 1 / 3600)
        broker.enqueue_many([NewTask(f"s{i}", name="slow") for i in range(5)])
        assert leased(broker) == ["s0"]  # four throttled, up to four hours out
        limited(broker, 100)  # the fix deployed: a hundred a second
        assert leased(broker) == []  # this call releases their line
        now = broker.server_time_ms()
        assert all(record_of(broker, f"s{i}").run_at <= now for i in range(1, 5))
        assert reserved(broker) == {}
        # The log says so: each task's new run-at, and the limit whose line was released.
        assert [(e.task, int(e.fields["at"]), e.fields["limit"]) for e in
                events(broker.client, broker.keys) if e.type == "rescheduled"] == [
            (f"s{i}", record_of(broker, f"s{i}").run_at, "slow") for i in range(1, 5)]
        started: list[str] = []
        while len(started) < 4:  # checked again, at the new spacing: 10 ms apart
            broker.promote()
            started += leased(broker)
            wait_past(0.005)
        assert sorted(started) == ["s1", "s2", "s3", "s4"]
        no_ghost_slots(broker)

    def test_a_released_line_is_checked_again_in_the_order_it_waited_in(
        self, broker: Broker
    ) -> None:
        limited(broker, 1 / 3600)
        # Ids in the reverse of their places in the line: ties among due tasks would
        # be promoted in id order.
        broker.enqueue_many([NewTask(task_id, name="slow") for task_id in "zyxw"])
        assert leased(broker) == ["z"]
        before = {t: hours_away(broker, t) for t in "yxw"}  # an hour apart: 1, 2, 3
        limited(broker, 2 / 3600)
        assert leased(broker) == []  # releases the line
        broker.promote()
        assert leased(broker) == []  # each throttled again, at the new spacing
        after = {t: hours_away(broker, t) for t in "yxw"}
        assert sorted(after, key=after.__getitem__) == ["y", "x", "w"]
        assert all(after[t] < before[t] for t in "yxw"), (before, after)

    def test_a_raised_burst_makes_the_tasks_waiting_at_the_old_one_due_sooner(
        self, broker: Broker
    ) -> None:
        limited(broker, 1 / 3600)
        broker.enqueue_many([NewTask(f"s{i}", name="slow") for i in range(4)])
        assert leased(broker) == ["s0"]  # s1-s3 throttled, one to three hours out
        limited(broker, 1 / 3600, burst=3)  # redeployed: the same rate, a burst of 3
        assert leased(broker) == []  # this call releases their line
        broker.promote()
        # Checked again: two spacings of tolerance let s1 and s2 start now; s3 waits
        # for its slot less those two spacings, an hour out, not three.
        assert sorted(leased(broker)) == ["s1", "s2"]
        assert round(hours_away(broker, "s3")) == 1
        no_ghost_slots(broker)

    def test_a_long_line_is_released_a_call_at_a_time_and_a_cancel_leaves_it(
        self, broker: Broker
    ) -> None:
        limited(broker, 1 / 3600)
        broker.enqueue_many([NewTask(f"s{i:04}", name="slow") for i in range(1501)])
        assert leased(broker, 1) == ["s0000"]
        assert leased(broker, 1) == leased(broker, 1) == []  # a call passes a thousand
        assert len(reserved(broker)) == 1500
        limited(broker, 2 / 3600)
        now = broker.server_time_ms()
        leased(broker, 1)  # releases the line, and makes its first thousand due
        key = broker.keys.prefix + "released:slow"
        left = broker.client.zrange(key, 0, -1)
        assert len(left) == 500
        assert broker.cancel(left[0]).outcome == "cancelled"
        assert broker.client.zcard(key) == 499
        leased(broker, 1)
        assert broker.client.exists(key) == 0
        waiting = broker.client.zrange(broker.keys.delayed, 0, -1, withscores=True)
        assert len(waiting) == 1499 and max(at for _, at in waiting) <= now + 1000

    def test_a_raised_limit_hands_its_line_on_whole_rather_than_walking_each_task(
        self, broker: Broker
    ) -> None:
        """The release runs inside a lease, which every worker waits on: a line of
        200,000 throttled tasks walked by a union held Redis over half a second."""
        limited(broker, 1 / 3600)
        broker.enqueue_many([NewTask(f"s{i}", name="slow") for i in range(5)])
        assert leased(broker) == ["s0"]  # four throttled
        unions, renames = union_calls(broker)
        limited(broker, 2 / 3600)
        assert leased(broker) == []  # releases the line
        assert union_calls(broker) == (unions, renames + 1)
        assert reserved(broker) == {}
        assert broker.counts().delayed == 4
        no_ghost_slots(broker)

    def test_a_throttled_task_leased_on_time_starts_and_forgets_its_slot(
        self, broker: Broker
    ) -> None:
        limited(broker, 20)  # a slot every 50 ms
        broker.enqueue_many([NewTask(f"s{i}", name="slow") for i in range(2)])
        assert leased(broker) == ["s0"]
        assert "rate_slot" in record_of(broker, "s1").extra
        wait_until(lambda: broker.promote() == ["s1"], 5, "s1's slot")
        assert leased(broker) == ["s1"]
        assert "rate_slot" not in record_of(broker, "s1").extra

    def test_a_late_start_pushes_the_next_back_so_the_rate_holds_on_start_times(
        self, broker: Broker
    ) -> None:
        """Two throttled tasks leased together long after their slots: the first starts,
        the second waits a whole spacing after it rather than starting beside it."""
        limited(broker, 20)  # a slot every 50 ms
        broker.enqueue_many([NewTask(f"s{i}", name="slow") for i in range(3)])
        assert leased(broker) == ["s0"]
        wait_past(0.2)  # both slots long gone: a busy worker comes late
        broker.promote()
        assert leased(broker) == ["s1"]
        throttled = [e for e in events(broker.client, broker.keys)
                     if e.type == "throttled" and e.task == "s2"]
        assert len(throttled) == 2  # once at the first lease, again now
        again_at = int(throttled[1].fields["at"])
        started = int(next(e for e in events(broker.client, broker.keys)
                           if e.type == "leased" and e.task == "s1").fields["ts"])
        assert again_at - started == 50

    def test_other_tasks_are_not_held_up(self, broker: Broker) -> None:
        limited(broker, 1)
        broker.enqueue_many([NewTask("s0", name="slow"), NewTask("s1", name="slow"),
                             NewTask("f0", name="fast"), NewTask("f1", name="fast")])
        assert leased(broker) == ["s0", "f0", "f1"]

    def test_a_burst_lets_that_many_through_at_once(self, broker: Broker) -> None:
        limited(broker, 1, burst=3)
        broker.enqueue_many([NewTask(f"s{i}", name="slow") for i in range(5)])
        assert leased(broker) == ["s0", "s1", "s2"]

    def test_the_worker_sleeps_until_the_next_slot(self, broker: Broker) -> None:
        limited(broker, 2)  # a slot every 500 ms
        broker.enqueue_many([NewTask(f"s{i}", name="slow") for i in range(2)])
        batch = broker.lease_many("w", 30, 10)
        assert [t.task_id for t in batch.tasks] == ["s0"]
        assert batch.wait_seconds is not None and 0.4 < batch.wait_seconds <= 0.5

    def test_a_task_throttled_before_its_limit_was_dropped_is_not_shown_throttled_after(
        self, broker: Broker
    ) -> None:
        limited(broker, 10)
        broker.enqueue_many([NewTask(f"s{i}", name="slow") for i in range(2)])
        assert leased(broker) == ["s0"]  # s1 throttled, waiting for its slot
        broker.rate_limits = ()  # a deploy drops the limit
        wait_past(0.2)
        broker.promote()
        (task,) = broker.lease_many("w", 30, 10).tasks
        assert broker.fail(task.task_id, task.token, "boom", backoff_base=30,
                           backoff_max=30).status == "retry"
        assert [(d.task_id, d.throttled) for d in take_snapshot(broker).delayed] == [
            ("s1", False)]

    def test_a_lease_without_the_limit_is_not_held_back(self, broker: Broker) -> None:
        broker.enqueue_many([NewTask(f"s{i}", name="slow") for i in range(3)])
        assert len(leased(broker)) == 3


def registered(broker: Broker, worker_id: str) -> str:
    """`worker_id`, registered on the broker's queue as a live worker."""
    registry.register(broker, Presence(worker_id, "host", 1, [broker.queue], 1, ["slow"],
                                       "test"), in_hand=0, ttl=30)
    return worker_id


def rescheduled(broker: Broker) -> int:
    return sum(e.type == "rescheduled" for e in events(broker.client, broker.keys))


def one_started_the_rest_waiting(broker: Broker, worker_id: str, tasks: int) -> None:
    """A limit of one an hour on "slow", applied by `worker_id`'s lease: the first of
    `tasks` tasks of it started, the rest throttled, up to hours out."""
    limited(broker, 1 / 3600)
    broker.enqueue_many([NewTask(f"s{i}", name="slow") for i in range(tasks)])
    assert [t.task_id for t in broker.lease_many(worker_id, 30, 10).tasks] == ["s0"]


class TestTwoDeploys:
    """Two deploys declaring different limits for one task, side by side (a rolling
    deploy that changes the rate): RateDeclaration.tla."""

    def test_the_newer_applies_the_limit_a_live_worker_of_the_older_holds_and_says_so(
        self, broker: Broker, caplog: pytest.LogCaptureFixture
    ) -> None:
        old, new = registered(broker, "old"), registered(broker, "new")
        one_started_the_rest_waiting(broker, old, 5)
        hour_us = 3_600_000_000
        for turn in range(20):  # each deploy leasing in turn, as both keep running
            limited(broker, 100) if turn % 2 == 0 else limited(broker, 1 / 3600)
            batch = broker.lease_many(new if turn % 2 == 0 else old, 30, 10)
            assert batch.tasks == []
            assert batch.held == ((HeldLimit("slow", hour_us, 1, old),) if turn % 2 == 0
                                  else ())
        # No release: the four wait for their slots an hour apart, as the older declares.
        assert rescheduled(broker) == 0
        assert sorted(round(hours_away(broker, f"s{i}")) for i in range(1, 5)) == [1, 2, 3, 4]
        warned = [r.getMessage() for r in caplog.records if "another deploy" in r.message]
        assert len(warned) == 1, warned
        assert "task 'slow'" in warned[0] and "(1/h, burst 1)" in warned[0]
        assert "(100/s, burst 1)" in warned[0] and "'old'" in warned[0]

    def test_once_the_older_deploys_worker_stops_the_newers_limit_applies_for_good(
        self, broker: Broker
    ) -> None:
        old, new = registered(broker, "old"), registered(broker, "new")
        one_started_the_rest_waiting(broker, old, 5)
        registry.unregister(broker, old)
        limited(broker, 100)
        assert broker.lease_many(new, 30, 10).held == ()
        assert rescheduled(broker) == 4  # the line released, once
        registered(broker, old)  # a worker of the older deploy still leasing after
        for turn in range(10):
            limited(broker, 1 / 3600) if turn % 2 == 0 else limited(broker, 100)
            broker.promote()
            broker.lease_many(old if turn % 2 == 0 else new, 30, 10)
            wait_past(0.011)
        assert rescheduled(broker) == 4
        # Every waiting task went at the newer spacing: none is an hour away.
        assert all(hours_away(broker, f"s{i}") < 0.01 for i in range(1, 5)
                   if record_of(broker, f"s{i}").state == "delayed")

    @pytest.mark.parametrize(("interval", "burst"), [("nan", "1"), ("3600000000", "0"),
                                                     ("1e400", "1"), ("864000000000", "1")])
    def test_a_held_limit_written_out_of_range_by_hand_is_not_applied(
        self, broker: Broker, interval: str, burst: str
    ) -> None:
        old = registered(broker, "old")
        one_started_the_rest_waiting(broker, old, 3)
        broker.client.hset(broker.keys.rates, mapping={"slow|interval": interval,
                                                       "slow|burst": burst})
        limited(broker, 100)
        broker.enqueue("s3", name="slow")  # a task for the lease to apply the limit to
        assert broker.lease_many("new", 30, 10).held == ()
        assert broker.client.hmget(broker.keys.rates, "slow|interval", "slow|burst") == [
            "10000", "1"]
        assert "new" in broker.client.zrange(broker.keys.holders("slow"), 0, -1)

    def test_the_older_limit_holds_until_every_worker_that_applied_it_has_stopped(
        self, broker: Broker
    ) -> None:
        first, second = registered(broker, "old-1"), registered(broker, "old-2")
        new, later = registered(broker, "new-1"), registered(broker, "new-2")
        one_started_the_rest_waiting(broker, first, 4)
        broker.enqueue("s4", name="slow")
        assert broker.lease_many(second, 30, 10).tasks == []  # second applies it too
        registry.unregister(broker, second)  # the last to apply it stops; first runs on
        limited(broker, 100)
        assert [h.holder for h in broker.lease_many(new, 30, 10).held] == [first]
        assert rescheduled(broker) == 0
        registry.unregister(broker, first)
        assert broker.lease_many(new, 30, 10).held == ()  # every old one stopped: taken over
        assert rescheduled(broker) == 4
        broker.enqueue("s5", name="slow")
        broker.lease_many(later, 30, 10)  # the other new worker applies it too
        registry.unregister(broker, new)  # the taker stops, the other runs on
        limited(broker, 1 / 3600)
        old = registered(broker, "old-3")  # a worker of the old deploy, still starting
        assert [h.holder for h in broker.lease_many(old, 30, 10).held] == [later]
        assert rescheduled(broker) == 4  # not taken back

    @pytest.mark.parametrize("dead", [0, 9, 10, 25])
    def test_a_live_holder_behind_holders_long_gone_is_found_and_they_are_dropped(
        self, broker: Broker, dead: int
    ) -> None:
        old = registered(broker, "old")
        one_started_the_rest_waiting(broker, old, 3)
        later = broker.server_time_ms() + 1
        holders = broker.keys.holders("slow")
        if dead:
            broker.client.zadd(holders, {f"gone-{i}": later + i for i in range(dead)})
        limited(broker, 100)
        assert [h.holder for h in broker.lease_many("new", 30, 10).held] == [old]
        assert broker.client.zrange(holders, 0, -1) == [old]
        registry.unregister(broker, old)
        assert broker.lease_many("new", 30, 10).held == ()
        assert broker.client.zrange(holders, 0, -1) == ["new"]

    def test_a_worker_that_meets_no_task_of_the_name_still_holds_its_deploys_limit(
        self, broker: Broker
    ) -> None:
        first, idle = registered(broker, "old-1"), registered(broker, "old-2")
        new, other = registered(broker, "new-1"), registered(broker, "new-2")
        one_started_the_rest_waiting(broker, first, 3)
        assert broker.lease_many(idle, 30, 10).tasks == []  # no task of "slow" for it
        registry.unregister(broker, first)
        limited(broker, 60)
        assert [h.holder for h in broker.lease_many(new, 30, 10).held] == [idle]
        registry.unregister(broker, idle)
        assert broker.lease_many(new, 30, 10).held == ()  # every old one gone
        assert broker.lease_many(other, 30, 10).held == ()  # holds it too, no task met
        registry.unregister(broker, new)
        limited(broker, 1 / 3600)
        late = registered(broker, "old-3")  # an old worker still starting
        assert [h.holder for h in broker.lease_many(late, 30, 10).held] == [other]
        assert rescheduled(broker) == 2  # released once, not taken back

    def test_workers_restarted_under_their_ids_by_the_next_deploy_take_it_over(
        self, broker: Broker
    ) -> None:
        ids = [registered(broker, "worker-0"), registered(broker, "worker-1")]
        limited(broker, 1 / 3600)
        broker.enqueue_many([NewTask(f"s{i}", name="slow") for i in range(3)])
        for worker_id in ids:
            broker.lease_many(worker_id, 30, 10)
        limited(broker, 60)  # both restarted with the new limit, their records kept
        assert [h.holder for h in broker.lease_many(ids[0], 30, 10).held] == [ids[1]]
        assert broker.lease_many(ids[1], 30, 10).held == ()
        assert broker.lease_many(ids[0], 30, 10).held == ()
        assert broker.client.hget(broker.keys.rates, "slow|interval") == "16667"

    def test_holders_that_come_and_go_beside_a_live_one_leave_no_trail(
        self, broker: Broker
    ) -> None:
        limited(broker, 1 / 3600)
        broker.enqueue("s0", name="slow")
        broker.lease_many(registered(broker, "steady"), 30, 10)
        for i in range(300):
            broker.enqueue(f"b{i}", name="slow")  # met, and throttled
            broker.lease_many(registered(broker, f"brief-{i}"), 30, 10)
            registry.unregister(broker, f"brief-{i}")
        assert broker.client.zcard(broker.keys.holders("slow")) <= 3

    def test_a_lease_stores_and_holds_its_limit_before_any_task_of_the_name_comes(
        self, broker: Broker
    ) -> None:
        old, new = registered(broker, "old"), registered(broker, "new")
        limited(broker, 1 / 3600)
        assert broker.lease_many(old, 30, 10).tasks == []  # nothing to lease at all
        limited(broker, 60)
        broker.enqueue("s0", name="slow")
        assert [h.holder for h in broker.lease_many(new, 30, 10).held] == [old]

    def test_holders_of_a_limit_an_older_taskq_overwrote_hold_nothing_of_it(
        self, broker: Broker
    ) -> None:
        one, two = registered(broker, "new-1"), registered(broker, "new-2")
        limited(broker, 2)
        broker.enqueue("s0", name="slow")
        for worker_id in (one, two):
            broker.lease_many(worker_id, 30, 10)
        # A worker of the taskq before holders stores its 1/s and keeps no holders.
        broker.client.hset(broker.keys.rates, mapping={"slow|interval": "1000000",
                                                       "slow|burst": "1"})
        assert broker.lease_many(one, 30, 10).held == ()  # not deferred to new-2
        assert broker.client.hmget(broker.keys.rates, "slow|interval", "slow|holders") == [
            "500000", "500000/1"]
        assert broker.client.zrange(broker.keys.holders("slow"), 0, -1) == [one]

    def test_a_crashed_holders_limit_gives_way_once_its_record_expires(
        self, broker: Broker
    ) -> None:
        limited(broker, 1 / 3600)
        broker.enqueue_many([NewTask(f"s{i}", name="slow") for i in range(3)])
        old = registered(broker, "old")
        assert [t.task_id for t in broker.lease_many(old, 30, 10).tasks] == ["s0"]
        limited(broker, 100)
        assert broker.lease_many("new", 30, 10).held != ()
        broker.client.pexpire(broker.keys.worker(old), 1)  # its lease of life runs out
        wait_until(lambda: not broker.client.exists(broker.keys.worker(old)))
        assert broker.lease_many("new", 30, 10).held == ()
        assert rescheduled(broker) == 2


class TestLift:
    """A redeploy that removes a limit: its workers lift it as they start."""

    def test_a_removed_limit_makes_its_line_due_in_the_order_it_waited_in(
        self, broker: Broker
    ) -> None:
        limited(broker, 1 / 3600)
        # Ids in the reverse of their places in the line, as in the release's test.
        broker.enqueue_many([NewTask(task_id, name="slow") for task_id in "zyxw"])
        assert leased(broker) == ["z"]  # y, x and w an hour apart
        broker.rate_limits = ()  # redeployed without the limit
        assert broker.lift_rate_limits(["slow", QUEUE_LIMIT]) == Lifted(1, 0)
        assert broker.promote() == ["y", "x", "w"]
        assert leased(broker) == ["y", "x", "w"]
        assert reserved(broker) == {}
        assert broker.client.hgetall(broker.keys.rates) == {}
        log = [e for e in events(broker.client, broker.keys) if e.type == "rescheduled"]
        assert [(e.task, e.state, e.fields["limit"]) for e in log] == [
            (t, "delayed", "slow") for t in "yxw"]
        assert [int(e.fields["at"]) for e in log] == sorted(int(e.fields["at"]) for e in log)
        # Nothing is left to lift: the next call finds no limit and no line.
        assert broker.lift_rate_limits(["slow"]) == Lifted(0, 0)

    def test_a_released_mark_of_another_type_refuses_the_lift_before_any_task_moves(
        self, broker: Broker
    ) -> None:
        throttled_then_undeclared(broker, "zyx")
        key = f"{broker.keys.prefix}released_at"
        broker.client.hset(key, "not", "taskq's")
        with pytest.raises(BrokerError, match=f"WRONGTYPE {key} holds a hash"):
            broker.lift_rate_limits(["slow"])
        assert list(reserved(broker)) == ["y", "x"]
        broker.client.delete(key)
        assert broker.lift_rate_limits(["slow"]) == Lifted(1, 0)
        assert broker.promote() == ["y", "x"]

    def test_a_lifted_task_whose_record_is_of_another_type_leaves_delayed_alone(
        self, broker: Broker
    ) -> None:
        throttled_then_undeclared(broker, "zyx")
        broker.client.delete(broker.keys.task("y"))
        broker.client.set(broker.keys.task("y"), "not a record")
        assert broker.lift_rate_limits(["slow"]) == Lifted(1, 0)
        assert broker.promote() == ["x"]
        assert broker.client.zcard(broker.keys.delayed) == 0
        assert broker.client.get(broker.keys.task("y")) == "not a record"

    def test_a_line_of_another_type_refuses_the_lift_before_any_task_leaves_its_line(
        self, broker: Broker
    ) -> None:
        throttled_then_undeclared(broker, "zyxw")
        key = f"{broker.keys.prefix}reserved:{QUEUE_LIMIT}"  # the second name's line
        broker.client.set(key, "not taskq's")
        assert_refused_unchanged(broker.client, key,
                                 lambda: broker.lift_rate_limits(["slow", QUEUE_LIMIT]))
        broker.client.delete(key)
        assert broker.lift_rate_limits(["slow", QUEUE_LIMIT]) == Lifted(1, 0)
        assert broker.promote() == ["y", "x", "w"]

    def test_a_line_lifted_over_several_calls_is_promoted_in_its_order(
        self, broker: Broker
    ) -> None:
        limited(broker, 1 / 3600)
        broker.enqueue_many([NewTask(f"s{i:04}", name="slow") for i in range(1501)])
        while broker.counts().ready:
            leased(broker, 1)  # s0000 starts; a call throttles a thousand
        broker.rate_limits = ()
        assert broker.lift_rate_limits(["slow"]) == Lifted(0, 500)
        order = broker.promote(100)
        # The rest, made due a moment later, comes after those the first call left: due
        # a millisecond apart after them, up to half a second from now.
        assert broker.lift_rate_limits(["slow"]) == Lifted(1, 0)
        deadline = time.monotonic() + 5
        while len(order) < 1500 and time.monotonic() < deadline:
            order += broker.promote(2000)
            wait_past(0.01)
        assert order == [f"s{i:04}" for i in range(1, 1501)]

    def test_a_task_in_two_lifted_lines_is_made_due_once(self, broker: Broker) -> None:
        broker.rate_limits = (RateLimit("x", 1 / 3600), RateLimit(QUEUE_LIMIT, 1 / 3600))
        broker.enqueue_many([NewTask(f"x{i}", name="x") for i in range(3)])
        assert leased(broker) == ["x0"]  # x1 and x2 wait in both lines
        broker.rate_limits = ()
        assert broker.lift_rate_limits(["x", QUEUE_LIMIT]) == Lifted(2, 0)
        log = [e.task for e in events(broker.client, broker.keys) if e.type == "rescheduled"]
        assert log == ["x1", "x2"]

    def test_a_waiting_task_whose_record_is_gone_leaves_delayed_unwritten(
        self, broker: Broker
    ) -> None:
        limited(broker, 1 / 3600)
        broker.enqueue_many([NewTask(f"s{i}", name="slow") for i in range(3)])
        assert leased(broker) == ["s0"]
        broker.client.delete(broker.keys.task("s1"))  # deleted by hand
        broker.rate_limits = ()
        assert broker.lift_rate_limits(["slow"]) == Lifted(1, 0)
        assert broker.client.exists(broker.keys.task("s1")) == 0
        assert broker.promote() == ["s2"]
        assert [e.task for e in events(broker.client, broker.keys)
                if e.type == "rescheduled"] == ["s2"]

    def test_a_long_line_is_lifted_a_call_at_a_time(self, broker: Broker) -> None:
        limited(broker, 1 / 3600)
        broker.enqueue_many([NewTask(f"s{i}", name="slow") for i in range(5)])
        assert leased(broker) == ["s0"]
        broker.rate_limits = ()
        assert broker.lift_rate_limits(["slow"], limit=3) == Lifted(0, 1)
        # The limit stays stored until its line is empty; leases do not apply it.
        assert broker.client.hexists(broker.keys.rates, "slow|interval")
        assert sorted(reserved(broker)) == ["s4"]
        assert broker.lift_rate_limits(["slow"], limit=3) == Lifted(1, 0)
        # s4 is due a millisecond after the last of the first call's, which may be
        # after now when both calls fell in one millisecond of the server's clock.
        wait_past(0.001)
        assert broker.promote() == ["s1", "s2", "s3", "s4"]
        no_ghost_slots(broker)

    def test_a_removed_name_limit_leaves_the_tasks_their_queue_slots(
        self, broker: Broker
    ) -> None:
        """QueueRateLimit.tla's NothingWaitsForARemovedLimit: with the name's limit
        (one an hour) lifted, each task waits for its queue slot (two an hour) alone."""
        queue_limit = RateLimit(QUEUE_LIMIT, 2 / 3600)
        broker.rate_limits = (RateLimit("x", 1 / 3600), queue_limit)
        broker.enqueue_many([NewTask(f"x{i}", name="x") for i in range(4)])
        assert leased(broker) == ["x0"]  # x1-x3 an hour apart, the name's limit binding
        assert [round(hours_away(broker, f"x{i}"), 1) for i in (1, 2, 3)] == [1, 2, 3]
        slots = reserved(broker, QUEUE_LIMIT)
        broker.rate_limits = (queue_limit,)
        assert broker.lift_rate_limits(["x"]) == Lifted(1, 0)
        broker.promote()
        assert leased(broker) == []  # refused by the queue's limit, keeping its slots
        assert reserved(broker, QUEUE_LIMIT) == slots
        assert [round(hours_away(broker, f"x{i}"), 1) for i in (1, 2, 3)] == [0.5, 1, 1.5]
        no_ghost_slots(broker)

    def test_what_is_not_a_limits_name_is_refused_and_no_names_lift_nothing(
        self, broker: Broker
    ) -> None:
        with pytest.raises(InvalidTaskError, match=r"invalid task name 'a\|b'"):
            broker.lift_rate_limits(["a|b"])
        assert broker.lift_rate_limits([]) == Lifted(0, 0)

    def test_more_names_than_a_call_takes_are_lifted_in_shares(self, broker: Broker) -> None:
        limited(broker, 1 / 3600)
        broker.enqueue_many([NewTask(f"s{i}", name="slow") for i in range(2)])
        assert leased(broker) == ["s0"]
        broker.rate_limits = ()
        names = [f"free{i}" for i in range(10_000)] + ["slow"]  # "slow" in the second
        assert broker.lift_rate_limits(names) == Lifted(1, 0)
        assert broker.promote() == ["s1"]


FREE_APP = '''
import taskq

app = taskq.App()

@app.task("slow")
def slow(n: int) -> None:
    pass
'''


def test_a_worker_of_a_deploy_without_the_limit_runs_its_waiting_tasks_at_once(
    tmp_path: Path, settings: Settings, queue: Broker, ledger_path: Path
) -> None:
    limited(queue, 1 / 3600)
    queue.enqueue_many([NewTask(f"r{i}", name="slow", payload={"n": i}) for i in range(4)])
    (first,) = queue.lease_many("w", 30, 4).tasks  # r1-r3 throttled, up to 3 h out
    assert queue.ack(first.task_id, first.token)
    (tmp_path / "free_app.py").write_text(FREE_APP)
    workers = WorkerProcesses(tmp_path, worker_env(settings.redis_url, queue.queue, ledger_path,
                                                   PYTHONPATH=str(tmp_path)))
    try:
        workers.start("--app", "free_app:app")
        wait_until(lambda: queue.counts().delayed + queue.counts().ready
                   + queue.counts().leased == 0, 20, "the lifted line's drain")
    finally:
        workers.stop_all()
    done = [e.task for e in events(queue.client, queue.keys) if e.type == "completed"]
    assert sorted(done) == ["r0", "r1", "r2", "r3"], workers.logs()
    assert queue.client.hgetall(queue.keys.rates) == {}


def union_calls(broker: Broker) -> tuple[int, int]:
    """ZUNIONSTORE and RENAME commands run so far by the Redis node holding the queue."""
    client: Any = broker.client
    where = {"target_nodes": client.get_node_from_key(broker.keys.ready)} if ON_CLUSTER else {}
    stats = client.info("commandstats", **where)
    unions, renames = (int(stats.get(f"cmdstat_{c}", {}).get("calls", 0))
                       for c in ("zunionstore", "rename"))
    return unions, renames


def reserved(broker: Broker, limit: str = "slow") -> dict[str, int]:
    """The slots (us) tasks wait for under `limit`, by task."""
    slots = broker.client.zrange(broker.keys.reserved(limit), 0, -1, withscores=True)
    return {task: int(slot) for task, slot in slots}


def hours_away(broker: Broker, task_id: str) -> float:
    return (record_of(broker, task_id).run_at - broker.server_time_ms()) / 3_600_000


class TestGiveBack:
    """A throttled task that leaves the line gives its slot back (lua/_rates.lua)."""

    @pytest.mark.parametrize("written", ["reserved", "released", "rates"])
    def test_a_cancel_a_limit_key_of_another_type_would_refuse_part_way_moves_nothing(
        self, broker: Broker, written: str
    ) -> None:
        limited(broker, 1 / 3600)
        broker.enqueue_many([NewTask("s0", name="slow"), NewTask("s1", name="slow")])
        assert leased(broker) == ["s0"]  # s1 throttled, on delayed
        key = {"reserved": broker.keys.reserved("slow"), "rates": broker.keys.rates,
               "released": f"{broker.keys.prefix}released:slow"}[written]
        assert_refused_while_overwritten(broker.client, key, lambda: broker.cancel("s1"))
        assert broker.cancel("s1").outcome == "cancelled"
        assert reserved(broker) == {}

    def test_a_lease_that_applies_no_limit_finds_its_line_of_another_type_and_loses_nothing(
        self, broker: Broker
    ) -> None:
        """Redeployed without the limit, a lease gives the slot a once throttled task
        waited for back to a line it never checked: refused there, the tasks it popped
        go back to ready, in their order."""
        throttled_then_undeclared(broker, "sz")
        broker.client.zadd(broker.keys.delayed, {"z": 0})  # its hour passes
        assert broker.promote() == ["z"]
        broker.enqueue_many([NewTask(f"p{i}", name="plain") for i in range(3)])
        before = broker.client.lrange(broker.keys.ready, 0, -1)
        key = broker.keys.reserved("slow")
        broker.client.delete(key)
        broker.client.set(key, "not taskq's")
        with pytest.raises(BrokerError, match=f"WRONGTYPE {key} holds a string"):
            leased(broker)
        assert broker.client.lrange(broker.keys.ready, 0, -1) == before
        broker.client.delete(key)
        assert sorted(leased(broker)) == ["p0", "p1", "p2", "z"]

    def test_cancelled_tasks_at_the_end_of_the_line_leave_no_slot_to_wait_behind(
        self, broker: Broker
    ) -> None:
        limited(broker, 1 / 3600)  # one an hour
        broker.enqueue_many([NewTask(f"s{i}", name="slow") for i in range(4)])
        assert leased(broker) == ["s0"]  # s1, s2, s3 throttled: 1, 2 and 3 hours out
        for task_id in ("s3", "s2", "s1"):
            assert broker.cancel(task_id).outcome == "cancelled"
        assert reserved(broker) == {}
        broker.enqueue("new", name="slow")
        assert leased(broker) == []
        # The first slot after s0's start, not the fourth.
        assert 0.99 < hours_away(broker, "new") <= 1

    def test_a_cancelled_task_in_the_middle_of_the_line_leaves_the_others_their_slots(
        self, broker: Broker
    ) -> None:
        limited(broker, 1 / 3600)
        broker.enqueue_many([NewTask(f"s{i}", name="slow") for i in range(4)])
        assert leased(broker) == ["s0"]
        before = reserved(broker)
        broker.cancel("s2")
        assert reserved(broker) == {k: v for k, v in before.items() if k != "s2"}
        broker.enqueue("new", name="slow")
        assert leased(broker) == []
        assert 3.99 < hours_away(broker, "new") <= 4  # behind s3, whose slot is kept
        broker.cancel("s3")
        broker.cancel("new")
        broker.enqueue("newer", name="slow")
        assert leased(broker) == []
        assert 1.99 < hours_away(broker, "newer") <= 2  # just behind s1 now

    def test_a_started_task_leaves_the_line(self, broker: Broker) -> None:
        limited(broker, 20)  # a slot every 50 ms
        broker.enqueue_many([NewTask(f"s{i}", name="slow") for i in range(3)])
        assert leased(broker) == ["s0"]
        assert set(reserved(broker)) == {"s1", "s2"}
        done: list[str] = []
        while len(done) < 2:
            wait_past(0.06)
            broker.promote()
            done += leased(broker)
        assert done == ["s1", "s2"]
        assert reserved(broker) == {}

    def test_a_task_throttled_again_keeps_one_slot_the_later(self, broker: Broker) -> None:
        limited(broker, 20)
        broker.enqueue_many([NewTask(f"s{i}", name="slow") for i in range(3)])
        assert leased(broker) == ["s0"]
        first = reserved(broker)
        wait_past(0.2)
        broker.promote()
        assert leased(broker) == ["s1"]  # s2 is throttled again behind s1's late start
        again = reserved(broker)
        assert set(again) == {"s2"} and again["s2"] > first["s2"]

    def test_a_cancel_gives_back_the_queues_slot_too(self, broker: Broker) -> None:
        broker.rate_limits = (RateLimit(QUEUE_LIMIT, 1 / 3600),)
        broker.enqueue_many([NewTask(f"q{i}", name=f"n{i}") for i in range(3)])
        assert leased(broker) == ["q0"]
        assert set(reserved(broker, QUEUE_LIMIT)) == {"q1", "q2"}
        broker.cancel("q2")
        broker.cancel("q1")
        assert reserved(broker, QUEUE_LIMIT) == {}
        broker.enqueue("new", name="n9")
        assert leased(broker) == []
        assert 0.99 < hours_away(broker, "new") <= 1

    def test_a_task_started_with_its_limit_dropped_leaves_the_line(
        self, broker: Broker
    ) -> None:
        limited(broker, 10)
        broker.enqueue_many([NewTask(f"s{i}", name="slow") for i in range(2)])
        assert leased(broker) == ["s0"]
        broker.rate_limits = ()
        wait_past(0.2)
        broker.promote()
        assert leased(broker) == ["s1"]
        assert reserved(broker) == {}
        no_ghost_slots(broker)  # its slot given back, not only taken out of the line

    def test_a_task_started_by_a_lease_that_limits_other_names_gives_back_its_slot(
        self, broker: Broker
    ) -> None:
        limited(broker, 10)
        broker.enqueue_many([NewTask(f"s{i}", name="slow") for i in range(4)])
        assert leased(broker) == ["s0"]
        broker.rate_limits = (RateLimit("other", 10),)
        wait_past(0.4)
        broker.promote()
        assert sorted(leased(broker)) == ["s1", "s2", "s3"]
        assert reserved(broker) == {}
        no_ghost_slots(broker)


def test_names_that_extend_one_another_keep_their_own_cursors(broker: Broker) -> None:
    broker.rate_limits = (RateLimit("a", 1 / 3600), RateLimit("a:next", 1 / 3600))
    broker.enqueue_many([NewTask("a1", name="a"), NewTask("a2", name="a")])
    assert leased(broker) == ["a1"]  # a2 throttled: a's next slot is an hour out
    broker.enqueue("n1", name="a:next")
    assert leased(broker) == ["n1"]


def test_a_lease_applying_thousands_of_limits_reads_their_cursors_in_chunks(
    broker: Broker,
) -> None:
    # Four stored fields a limit: 3,000 limits are 12,000, past what Lua unpacks at once.
    broker.rate_limits = tuple(RateLimit(f"n{i}", 1 / 3600) for i in range(3000))
    broker.enqueue_many([NewTask("first", name="n2999"), NewTask("second", name="n2999")])
    assert leased(broker) == ["first"]
    assert hours_away(broker, "second") == pytest.approx(1, abs=0.01)


class TestQueueLimit:
    def test_is_declared_per_queue_and_named_in_its_errors(self, app: App) -> None:
        app.task("limited", rate_limit="10/s")(lambda: None)
        app.queue_rate_limit("100/s", rate_burst=10)
        app.queue_rate_limit("5/m", queue="emails")
        assert app.rate_limits() == (RateLimit("limited", 10.0), RateLimit(QUEUE_LIMIT, 100.0, 10))
        assert app.rate_limits("emails") == (RateLimit("limited", 10.0),
                                             RateLimit(QUEUE_LIMIT, 5 / 60))
        assert app.rate_limits("other") == (RateLimit("limited", 10.0),)
        with pytest.raises(ConfigError, match="queue 'emails': rate_limit must look like"):
            app.queue_rate_limit("fast", queue="emails")

    def test_holds_for_every_task_of_the_queue_together(self, broker: Broker) -> None:
        broker.rate_limits = (RateLimit(QUEUE_LIMIT, 1 / 3600, 2),)  # two, then one an hour
        broker.enqueue_many([NewTask("a", name="x"), NewTask("b", name="y"),
                             NewTask("c", name="z")])
        assert leased(broker) == ["a", "b"]
        throttled = [e for e in events(broker.client, broker.keys) if e.type == "throttled"]
        assert [(e.task, e.fields["limit"]) for e in throttled] == [("c", "queue")]

    def test_a_start_passes_its_names_limit_and_the_queues(self, broker: Broker) -> None:
        broker.rate_limits = (RateLimit("x", 1 / 3600), RateLimit(QUEUE_LIMIT, 1 / 3600, 3))
        broker.enqueue_many([NewTask("x1", name="x"), NewTask("x2", name="x"),
                             NewTask("y1", name="y"), NewTask("y2", name="y"),
                             NewTask("x3", name="x")])
        assert leased(broker) == ["x1", "y1", "y2"]
        throttled = {e.task: e.fields["limit"] for e in events(broker.client, broker.keys)
                     if e.type == "throttled"}
        # x2: only its name's limit refused (the queue had room); x3: both did.
        assert throttled == {"x2": "task", "x3": "both"}
        # A start refused by one limit moves neither limit's start cursor.
        assert record_of(broker, "x3").state == "delayed"

    def test_a_raised_name_rate_leaves_its_tasks_their_places_in_the_queues_line(
        self, broker: Broker
    ) -> None:
        both = (RateLimit("x", 1 / 3600), RateLimit(QUEUE_LIMIT, 1 / 3600))
        broker.rate_limits = both
        broker.enqueue_many([NewTask(f"x{i}", name="x") for i in range(5)])
        assert leased(broker) == ["x0"]  # x1-x4 throttled by both, an hour apart
        before = reserved(broker, QUEUE_LIMIT)
        broker.rate_limits = (RateLimit("x", 2 / 3600), both[1])  # x redeployed faster
        assert leased(broker) == []  # releases x's line: x1-x4 due now
        broker.promote()
        assert leased(broker) == []  # each refused by the queue's limit again
        # Each waits for the queue slot it held, not one behind the line's end.
        assert reserved(broker, QUEUE_LIMIT) == before
        assert [round(hours_away(broker, f"x{i}")) for i in range(1, 5)] == [1, 2, 3, 4]
        no_ghost_slots(broker)

    def test_a_task_refused_again_once_a_start_took_its_slot_goes_to_the_end(
        self, broker: Broker
    ) -> None:
        broker.rate_limits = (RateLimit(QUEUE_LIMIT, 1 / 3600),)
        broker.enqueue_many([NewTask("a", name="x"), NewTask("b", name="x")])
        assert leased(broker) == ["a"]
        slot = reserved(broker, QUEUE_LIMIT)["b"]
        # A start that took b's slot (a cursor a late lease moved past it, set by hand).
        broker.client.hset(broker.keys.rates, QUEUE_LIMIT, slot + 1)
        broker.client.zadd(broker.keys.delayed, {"b": 0})
        broker.promote()
        assert leased(broker) == []
        assert reserved(broker, QUEUE_LIMIT)["b"] == slot + 1
        no_ghost_slots(broker)


QUEUE_RATE_APP = '''
import taskq

app = taskq.App()
app.queue_rate_limit("20/s")

@app.task("one")
def one(n: int) -> None:
    pass

@app.task("two")
def two(n: int) -> None:
    pass
'''


def test_workers_together_never_start_the_queues_tasks_faster_than_its_rate(
    tmp_path: Path, settings: Settings, queue: Broker, ledger_path: Path
) -> None:
    """Three worker processes drain 60 tasks of two names under a queue limit of 20 a
    second, as fast together as one limited name would be."""
    tasks = [NewTask(f"q{i:02}", name="one" if i % 2 else "two", payload={"n": i})
             for i in range(60)]
    drain_at_twenty_a_second(tmp_path, settings, queue, ledger_path, QUEUE_RATE_APP, tasks)


def drain_at_twenty_a_second(tmp_path: Path, settings: Settings, queue: Broker,
                             ledger_path: Path, app: str, tasks: list[NewTask]) -> None:
    """Three worker processes of `app` (a module whose limit is 20 starts a second) drain
    `tasks` (60 of them). By the Redis times of their `leased` events, no one-second
    window holds more than 20 + 1 starts (a window's edges can each catch one slot),
    and the drain keeps close to the rate: 59 intervals of 50 ms, 2.95 s at the rate,
    well under twice that."""
    (tmp_path / "limited_app.py").write_text(app)
    queue.enqueue_many(tasks)
    workers = WorkerProcesses(tmp_path, worker_env(settings.redis_url, queue.queue, ledger_path,
                                                   PYTHONPATH=str(tmp_path)))
    try:
        for _ in range(3):
            workers.start("--app", "limited_app:app", "--concurrency", "4")
        wait_until(lambda: queue.counts().ready + queue.counts().delayed
                   + queue.counts().leased == 0, 30, "the drain")
    finally:
        workers.stop_all()
    starts = sorted(int(e.fields["ts"]) for e in events(queue.client, queue.keys)
                    if e.type == "leased")
    assert len(starts) == 60
    busiest = max(sum(1 for t in starts if s <= t < s + 1000) for s in starts)
    assert busiest <= 21, (busiest, workers.logs())
    seconds = (starts[-1] - starts[0]) / 1000
    assert 2.9 <= seconds < 6.0, seconds
    assert Counter(e.type for e in events(queue.client, queue.keys))["throttled"] > 0


RATE_APP = '''
import taskq

app = taskq.App()

@app.task("slow", rate_limit="20/s")
def slow(n: int) -> None:
    pass
'''


def test_workers_together_never_start_a_limited_task_faster_than_its_rate(
    tmp_path: Path, settings: Settings, queue: Broker, ledger_path: Path
) -> None:
    """Three worker processes drain 60 tasks limited to 20 a second."""
    tasks = [NewTask(f"r{i:02}", name="slow", payload={"n": i}) for i in range(60)]
    drain_at_twenty_a_second(tmp_path, settings, queue, ledger_path, RATE_APP, tasks)


FASTER_APP = '''
import taskq

app = taskq.App()

@app.task("slow", rate_limit="40/s", rate_burst=2)
def slow(n: int) -> None:
    pass
'''


def test_a_rolling_deploy_keeps_the_old_rate_until_its_worker_stops_then_takes_the_new(
    tmp_path: Path, settings: Settings, queue: Broker, ledger_path: Path
) -> None:
    """A worker of the old deploy (20/s) and one of the new (40/s, burst 2) drain side by
    side: the new one applies the old limit, says so once, and no line is released; once
    the old worker stops, the new limit applies."""
    (tmp_path / "limited_app.py").write_text(RATE_APP)
    (tmp_path / "faster_app.py").write_text(FASTER_APP)
    workers = WorkerProcesses(tmp_path, worker_env(settings.redis_url, queue.queue, ledger_path,
                                                   PYTHONPATH=str(tmp_path)))

    def log() -> list[Event]:
        return events(queue.client, queue.keys)

    def drained() -> bool:
        return queue.counts() == type(queue.counts())(0, 0, 0, 0)

    try:
        old = workers.start("--app", "limited_app:app", "--concurrency", "4")
        queue.enqueue("first", name="slow", payload={"n": 0})
        wait_until(lambda: any(e.type == "completed" for e in log()), 20, "the old's start")
        new = workers.start("--app", "faster_app:app", "--concurrency", "4")
        wait_until(lambda: queue.client.zcard(queue.keys.workers) == 2, 20, "both registered")
        queue.enqueue_many([NewTask(f"a{i:02}", name="slow", payload={"n": i})
                            for i in range(40)])
        wait_until(drained, 30, "the drain side by side")
        old.terminate()
        assert old.wait(20) == 0
        queue.enqueue_many([NewTask(f"b{i:02}", name="slow", payload={"n": i})
                            for i in range(40)])
        wait_until(drained, 30, "the drain after the old stopped")
    finally:
        workers.stop_all()
    both = [int(e.fields["ts"]) for e in log() if e.type == "leased" and e.task[0] == "a"]
    after = [int(e.fields["ts"]) for e in log() if e.type == "leased" and e.task[0] == "b"]
    assert (len(both), len(after)) == (40, 40)
    busiest = max(sum(1 for t in both if s <= t < s + 1000) for s in both)
    assert busiest <= 21, (busiest, workers.logs())  # the old limit, side by side
    assert not any(e.type == "rescheduled" for e in log()), workers.logs()
    held = [line for line in workers.log(new).splitlines() if "another deploy" in line]
    assert len(held) == 1 and "(20/s, burst 1)" in held[0], workers.logs()
    # After the stop, the new limit is stored, held by the new worker.
    stored = queue.client.hmget(queue.keys.rates, "slow|interval", "slow|burst")
    assert stored == ["25000", "2"], stored
    holders = queue.client.zrange(queue.keys.holders("slow"), 0, -1)
    assert [pid_of(h) for h in holders] == [new.pid]
