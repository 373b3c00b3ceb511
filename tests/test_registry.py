"""The workers registry: what a worker says about itself, refreshed every heartbeat, gone
at once when it stops and within a lease when it vanishes; read by `taskq workers`, the
JSON API, and `taskq enqueue`'s warning about a task name no live worker runs."""

from __future__ import annotations

import dataclasses
import signal
import time
from typing import Any

import httpx
import pytest
import redis

from cli_support import CONFIG_VARIABLES
from conftest import ON_CLUSTER
from helpers import assert_refused_unchanged
from serve_support import Server
from taskq import App
from taskq.broker import Broker
from taskq.cli import main
from taskq.errors import BrokerError, TaskqError
from taskq.registry import (
    MAX_LISTED,
    Presence,
    live_count,
    longest_dead_ttl,
    not_run,
    read_workers,
    register,
    unregister,
)
from taskq.settings import Settings
from waiting import WorkerProcesses, wait_until
from worker_support import StartWorker

PRESENCE = Presence(worker_id="w-1", host="box", pid=42, queues=("q", "other"),
                    concurrency=8, tasks=("shop.charge", "shop.send_welcome"),
                    version="0.1.0")


class TestTheRecord:
    def test_what_a_worker_says_is_read_back_and_its_start_is_kept(
        self, broker: Broker
    ) -> None:
        first = register(broker, PRESENCE, in_hand=0, ttl=30)
        time.sleep(0.01)
        second = register(broker, PRESENCE, in_hand=3, ttl=30)
        now, (worker,) = read_workers(broker)
        assert (worker.worker_id, worker.host, worker.pid, worker.queues) == (
            "w-1", "box", 42, ["q", "other"])
        assert (worker.concurrency, worker.in_hand, worker.version) == (8, 3, "0.1.0")
        assert worker.tasks == ["shop.charge", "shop.send_welcome"]
        assert (worker.started_at, worker.last_beat) == (first, second) and second > first
        assert now >= second

    def test_a_record_not_written_again_expires_with_its_ttl(
        self, broker: Broker
    ) -> None:
        register(broker, PRESENCE, in_hand=0, ttl=0.2)
        assert len(read_workers(broker)[1]) == 1
        wait_until(lambda: read_workers(broker)[1] == [], 2)
        assert not broker.client.exists(broker.keys.worker("w-1"))

    def test_unregister_takes_it_out_at_once(self, broker: Broker) -> None:
        register(broker, PRESENCE, in_hand=0, ttl=30)
        assert unregister(broker, "w-1") is True
        assert read_workers(broker)[1] == []
        assert unregister(broker, "w-1") is False

    def test_its_indexes_expire_with_the_last_record_written_to_them(
        self, broker: Broker
    ) -> None:
        """A fleet that goes away for good, killed or stopped, leaves no key for ever."""
        register(broker, dataclasses.replace(PRESENCE, worker_id="w-long"), 0, ttl=0.4)
        register(broker, PRESENCE, in_hand=0, ttl=0.05)  # no shorter than the longest
        unregister(broker, "w-long")
        time.sleep(0.1)
        assert broker.client.exists(broker.keys.runners) == 1
        wait_until(lambda: broker.client.exists(broker.keys.runners, broker.keys.dead_ttls)
                   == 0, 2)

    @pytest.mark.parametrize(("ttl", "concurrency", "named"), [
        (0, 8, "lease_seconds"), (30, 0, "concurrency"), (30, 10**6, "concurrency")])
    def test_a_value_out_of_range_is_refused_before_any_write(
        self, broker: Broker, ttl: float, concurrency: int, named: str
    ) -> None:
        presence = Presence(**{**PRESENCE.__dict__, "concurrency": concurrency})
        with pytest.raises(TaskqError, match=named):
            register(broker, presence, in_hand=0, ttl=ttl)
        assert read_workers(broker)[1] == []
        assert not broker.client.exists(broker.keys.worker("w-1"))

    @pytest.mark.parametrize("written", ["dead_ttls", "runners"])
    def test_an_index_of_another_type_is_passed_over_and_the_record_written(
        self, broker: Broker, written: str
    ) -> None:
        """Refused, every worker of the queue would be missing from the registry: a
        result's wait would say no worker serves the queue, and the workers view
        would show none."""
        key = getattr(broker.keys, written)
        other = broker.keys.runners if written == "dead_ttls" else broker.keys.dead_ttls
        broker.client.set(key, "not taskq's")
        assert register(broker, PRESENCE, in_hand=0, ttl=30)
        assert [w.worker_id for w in read_workers(broker)[1]] == ["w-1"]
        assert broker.has_workers()
        assert broker.client.get(key) == "not taskq's"
        assert broker.client.zcard(other) > 0
        with pytest.raises(BrokerError, match="WRONGTYPE"):
            longest_dead_ttl(broker) if written == "dead_ttls" else not_run(broker, ["x"])

    @pytest.mark.parametrize("written", ["workers", "worker"])
    def test_a_key_of_another_type_is_refused_before_any_write(
        self, broker: Broker, written: str
    ) -> None:
        key = {"workers": broker.keys.workers, "worker": broker.keys.worker("w-1")}[written]
        broker.client.set(key, "not taskq's")
        assert_refused_unchanged(
            broker.client, key, lambda: register(broker, PRESENCE, in_hand=0, ttl=30))
        broker.client.delete(key)
        assert register(broker, PRESENCE, in_hand=0, ttl=30)
        assert [w.worker_id for w in read_workers(broker)[1]] == ["w-1"]

    def test_a_record_of_another_type_is_left_out_of_the_listing_not_failing_it(
        self, broker: Broker
    ) -> None:
        """Every worker's maintenance reads the listing to keep limits and dead tasks:
        one key written by something else must not stop every worker's purge."""
        register(broker, PRESENCE, in_hand=0, ttl=30)
        broker.client.zadd(broker.keys.workers, {"odd": time.time() * 1000 + 60_000})
        broker.client.set(broker.keys.worker("odd"), "not taskq's")
        assert [w.worker_id for w in read_workers(broker)[1]] == ["w-1"]

    def test_an_index_of_another_type_keeps_the_record_an_unregister_would_delete(
        self, broker: Broker
    ) -> None:
        register(broker, PRESENCE, in_hand=0, ttl=30)
        broker.client.delete(broker.keys.workers)
        broker.client.set(broker.keys.workers, "not taskq's")
        assert_refused_unchanged(
            broker.client, broker.keys.workers, lambda: unregister(broker, "w-1"))
        assert broker.client.exists(broker.keys.worker("w-1"))


def keeping(worker_id: str, days: float) -> Presence:
    return dataclasses.replace(PRESENCE, worker_id=worker_id, dead_ttl_seconds=days * 86400)


class TestTheLongestDeadTaskRetention:
    def test_is_read_past_the_workers_a_listing_returns_in_one_entry(
        self, broker: Broker
    ) -> None:
        """Every worker's purge asks it: a read of each record would cost the queue's
        Redis the square of its workers."""
        for n in range(MAX_LISTED):
            register(broker, keeping(f"w-{n:04}", 1), in_hand=0, ttl=30)
        register(broker, keeping("w-last", 30), in_hand=0, ttl=30)
        assert longest_dead_ttl(broker) == (30 * 86400 * 1000, 1)

    def test_passes_over_a_worker_that_expired_or_stopped(self, broker: Broker) -> None:
        register(broker, keeping("w-short", 1), in_hand=0, ttl=30)
        register(broker, keeping("w-stops", 60), in_hand=0, ttl=30)
        register(broker, keeping("w-expires", 30), in_hand=0, ttl=0.05)
        unregister(broker, "w-stops")
        time.sleep(0.1)
        assert longest_dead_ttl(broker) == (86400 * 1000, 2)
        register(broker, keeping("w-short", 1), in_hand=0, ttl=30)  # prunes the expired
        assert broker.client.zrange(broker.keys.dead_ttls, 0, -1) == ["w-short"]

    def test_a_retention_written_by_hand_past_any_a_worker_can_say_reads_as_the_most(
        self, broker: Broker
    ) -> None:
        """Not as the most negative integer Redis makes of inf, which a purge took for
        none said, applying its own shorter retention."""
        register(broker, keeping("w-1", 1), in_hand=0, ttl=30)
        for score, read in ((float("inf"), 315360000000), (1e300, 315360000000), (-5, 0)):
            broker.client.zadd(broker.keys.dead_ttls, {"w-1": score})
            assert longest_dead_ttl(broker) == (read, 1)

    def test_is_none_with_no_worker(self, broker: Broker) -> None:
        assert longest_dead_ttl(broker) == (0, 0)

    def test_an_entry_an_older_version_left_behind_is_pruned_by_later_registrations(
        self, broker: Broker
    ) -> None:
        register(broker, keeping("w-gone", 30), in_hand=0, ttl=30)
        broker.client.zrem(broker.keys.workers, "w-gone")  # an older unregister's way
        wait_until(lambda: register(broker, keeping("w-1", 1), in_hand=0, ttl=30) > 0
                   and broker.client.zscore(broker.keys.dead_ttls, "w-gone") is None, 5)


class TestTheNamesNoWorkerRuns:
    def test_are_those_no_live_worker_registered_with(self, broker: Broker) -> None:
        register(broker, PRESENCE, in_hand=0, ttl=30)
        assert not_run(broker, ["shop.refund", "shop.charge", "shop.audit"]) == [
            "shop.refund", "shop.audit"]
        assert not_run(broker, []) == []

    def test_leave_out_a_name_only_a_worker_of_a_version_that_does_not_index_it_runs(
        self, broker: Broker
    ) -> None:
        register(broker, PRESENCE, in_hand=0, ttl=30)
        # As the version before wrote it: neither index.
        broker.client.delete(broker.keys.runners)
        broker.client.zrem(broker.keys.dead_ttls, PRESENCE.worker_id)
        assert not_run(broker, ["shop.refund", "shop.charge"]) == ["shop.refund"]

    def test_are_said_past_the_thousand_workers_a_listing_shows(self, broker: Broker) -> None:
        """Every worker running a removed name's limit asks this: a fleet that a listing
        cannot show whole must still have the name's throttled tasks lifted."""
        for n in range(MAX_LISTED):
            register(broker, dataclasses.replace(PRESENCE, worker_id=f"w-{n:04}"),
                     in_hand=0, ttl=30)
        assert not_run(broker, ["shop.refund", "shop.charge"]) == ["shop.refund"]

    def test_leave_out_a_name_a_worker_that_writes_no_index_runs_past_a_listing(
        self, broker: Broker
    ) -> None:
        for n in range(MAX_LISTED):
            register(broker, dataclasses.replace(PRESENCE, worker_id=f"w-{n:04}",
                                                 tasks=("shop.charge",)), in_hand=0, ttl=20)
        old = dataclasses.replace(PRESENCE, worker_id="w-old", tasks=("shop.refund",))
        register(broker, old, in_hand=0, ttl=30)  # expires last: a listing leaves it out
        broker.client.zrem(broker.keys.runners, "shop.refund", "#w-old")  # as before marks
        assert not_run(broker, ["shop.refund", "shop.audit"]) == ["shop.audit"]

    def test_leave_out_a_name_a_worker_runs_that_registered_while_the_index_was_unusable(
        self, broker: Broker
    ) -> None:
        """Its names are not in the index until its next beat, though it is registered
        (and in the dead task index) all the same."""
        broker.client.set(broker.keys.runners, "not taskq's")
        runner = dataclasses.replace(PRESENCE, worker_id="w-refunds", tasks=("shop.refund",))
        register(broker, runner, in_hand=0, ttl=30)
        broker.client.delete(broker.keys.runners)  # the stray key mended by hand
        register(broker, PRESENCE, in_hand=0, ttl=30)  # runs shop.charge only
        assert not_run(broker, ["shop.refund", "shop.audit"]) == ["shop.audit"]

    def test_take_back_a_name_once_every_worker_that_ran_it_expired(
        self, broker: Broker
    ) -> None:
        register(broker, PRESENCE, in_hand=0, ttl=0.05)
        time.sleep(0.1)
        assert not_run(broker, ["shop.charge"]) == ["shop.charge"]


    def test_are_written_a_few_hundred_to_a_command_at_each_beat(
        self, broker: Broker
    ) -> None:
        """Every worker writes every name it runs at every beat: one command a name made
        a beat of a worker running 500 names cost Redis 855 us, 76 us without them."""
        names = [f"shop.task_{n:04}" for n in range(1200)]
        before = zadd_calls(broker)
        register(broker, dataclasses.replace(PRESENCE, tasks=names), in_hand=0, ttl=30)
        assert zadd_calls(broker) - before == 2 + 3  # the index, dead_ttls; 500, 500, 200
        assert broker.client.zcard(broker.keys.runners) == 1200 + 1  # and its mark
        assert not_run(broker, [*names, "shop.refund"]) == ["shop.refund"]


def zadd_calls(broker: Broker) -> int:
    """ZADD commands run so far by the Redis node holding the queue."""
    client: Any = broker.client
    where = {"target_nodes": client.get_node_from_key(broker.keys.ready)} if ON_CLUSTER else {}
    return int(client.info("commandstats", **where).get("cmdstat_zadd", {}).get("calls", 0))

class TestAWorker:
    def test_registers_on_start_says_what_it_holds_and_leaves_when_it_stops(
        self, app: App, start_worker: StartWorker
    ) -> None:
        @app.task("shop.slow")
        def slow() -> None:
            time.sleep(1.2)

        running = start_worker(concurrency=2)
        wait_until(lambda: read_workers(app.broker)[1])
        (worker,) = read_workers(app.broker)[1]
        assert worker.worker_id == running.worker.worker_id
        assert (worker.queues, worker.concurrency, worker.tasks) == (
            [app.queue], 2, ["shop.slow"])
        slow.enqueue()
        # The next beats (every lease/3) say the task is in hand.
        wait_until(lambda: read_workers(app.broker)[1][0].in_hand == 1, 5)
        running.stop()
        assert read_workers(app.broker)[1] == []


@pytest.mark.processes
class TestProcesses:
    def test_a_killed_worker_leaves_the_registry_within_a_lease(
        self, workers: WorkerProcesses, queue: Broker
    ) -> None:
        killed = workers.start()
        kept = workers.start()
        wait_until(lambda: len(read_workers(queue)[1]) == 2, 10)
        assert {w.pid for w in read_workers(queue)[1]} == {killed.pid, kept.pid}
        killed.send_signal(signal.SIGKILL)
        killed.wait(5)
        gone_by = time.monotonic() + 1.0 + 0.5  # one lease (1 s here), and a margin
        wait_until(lambda: {w.pid for w in read_workers(queue)[1]} == {kept.pid}, 3)
        assert time.monotonic() < gone_by

    def test_taskq_workers_lists_them_and_the_api_too(
        self, workers: WorkerProcesses, queue: Broker, settings: Settings,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        server: Server,
    ) -> None:
        process = workers.start("--concurrency", "3")
        wait_until(lambda: read_workers(queue)[1], 10)
        for variable in CONFIG_VARIABLES:
            monkeypatch.delenv(variable, raising=False)
        monkeypatch.setenv("REDIS_URL", settings.redis_url)
        assert main(["workers", "--queue", queue.queue]) == 0
        out = capsys.readouterr().out
        assert f"1 live worker(s) on queue {queue.queue!r}:" in out
        assert f"pid {process.pid}" in out and "0/3 in hand" in out
        assert "tasks taskq.simulate" in out
        reply = httpx.get(f"{server.url}/api/workers", params={"queue": queue.queue},
                          timeout=5).json()
        assert [w["pid"] for w in reply["workers"]] == [process.pid]
        assert reply["total"] == 1
        assert reply["workers"][0]["tasks"] == ["taskq.simulate"]
        assert main(["workers", "--queue", "nobody-here"]) == 0
        assert "no live worker on queue 'nobody-here'" in capsys.readouterr().out


    def test_a_fleet_past_the_listing_s_limit_is_counted_not_cut_silently(
        self, broker: Broker, settings: Settings, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        """1,506 live workers were listed as '1000 live worker(s)', and the API gave no
        total."""
        for n in range(MAX_LISTED + 5):
            register(broker, dataclasses.replace(PRESENCE, worker_id=f"w-{n}"), in_hand=0,
                     ttl=60)
        now, listed = read_workers(broker)
        assert len(listed) == MAX_LISTED
        assert live_count(broker, now, len(listed)) == MAX_LISTED + 5
        for variable in CONFIG_VARIABLES:
            monkeypatch.delenv(variable, raising=False)
        monkeypatch.setenv("REDIS_URL", settings.redis_url)
        assert main(["workers", "--queue", broker.queue]) == 0
        assert (f"{MAX_LISTED} live worker(s) on queue {broker.queue!r} (and up to 5 more "
                "not listed: each queue lists the 1,000 whose records expire soonest):"
                ) in capsys.readouterr().out


class TestEnqueueWarning:
    def test_a_name_no_live_worker_runs_is_enqueued_with_a_warning(
        self, broker: Broker, settings: Settings, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], client: redis.Redis,
    ) -> None:
        for variable in CONFIG_VARIABLES:
            monkeypatch.delenv(variable, raising=False)
        monkeypatch.setenv("REDIS_URL", settings.redis_url)
        mine = Broker(client, "shop")
        assert main(["enqueue", "1", "--queue", "shop", "--name", "shop.send_welcom"]) == 0
        assert "warning" not in capsys.readouterr().err  # no worker to ask yet
        register(mine, PRESENCE, in_hand=0, ttl=30)
        assert main(["enqueue", "1", "--queue", "shop", "--name", "shop.send_welcom"]) == 0
        err = capsys.readouterr().err
        assert "no live worker of queue 'shop' runs a task named 'shop.send_welcom'" in err
        assert "did you mean 'shop.send_welcome'?" in err
        register(mine, dataclasses.replace(PRESENCE, worker_id="w-2", tasks=("tasks.add",)),
                 in_hand=0, ttl=30)
        assert main(["enqueue", "1", "--queue", "shop", "--name", "add"]) == 0
        assert "did you mean 'tasks.add'?" in capsys.readouterr().err  # its module left out
        assert main(["enqueue", "1", "--queue", "shop", "--name", "shop.send_welcome"]) == 0
        assert "warning" not in capsys.readouterr().err
        assert mine.counts().ready == 4  # warned or not, each was enqueued
