"""A worker on several queues: their order (strict or weighted), and every guarantee kept
per queue, in-process and in real `taskq worker --queue a,b` processes."""

from __future__ import annotations

import signal
import threading
import time
import uuid
from datetime import timedelta

import pytest
import redis

from helpers import events, minted, record_of
from taskq import App, Worker, current_task
from taskq.broker import Broker
from taskq.connection import connect
from taskq.errors import BrokerError, ConfigError
from taskq.results import TaskRecord
from taskq.settings import Settings
from taskq.tools.embedded import free_port
from taskq.worker.queues import Leaser, QueueChoice, Queues, parse_queues
from waiting import WorkerProcesses, event_types, wait_for_state, wait_until
from worker_support import StartWorker

CHARGE = {"args": [], "kwargs": {"charge": 7}}


def send(broker: Broker, name: str, *args: object, delay: float = 0,
         max_retries: int = 3) -> str:
    """Enqueue a call of the task `name` on `broker`'s queue; its task id."""
    task_id = uuid.uuid4().hex
    broker.enqueue(task_id, delay, max_retries, {"args": list(args), "kwargs": {}},
                   name=name)
    return task_id


@pytest.fixture
def other(client: redis.Redis, queue: Broker) -> Broker:
    """A second queue beside the test's own, on the same client."""
    return Broker(client, f"{queue.queue}-2")


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
        ("high:²", "the weight of 'high' must be"),
        ("high:1001", "not 1001"),
        ("high:2,high:1", "names 'high' twice"),
        ("high,low,high", "names 'high' twice"),
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

    def test_the_queues_must_share_one_client(
        self, client: redis.Redis, settings: Settings
    ) -> None:
        elsewhere = connect(settings)
        try:
            with pytest.raises(ConfigError, match="share one Redis client"):
                Queues([Broker(client, "a"), Broker(elsewhere, "b")])
        finally:
            elsewhere.close()


class TestAQueueThatCannotBeReached:
    def test_is_skipped_for_the_turn_and_the_others_are_leased(
        self, client: redis.Redis, settings: Settings
    ) -> None:
        """A queue whose lease fails (on a cluster: its primary down) does not hold up the
        others; only when every queue fails does the turn fail."""
        gone = Broker(connect(Settings.from_env(
            {}, redis_url=f"redis://127.0.0.1:{free_port()}/0", redis_timeout_seconds=0.5)),
            "gone")
        live = Broker(client, "live")
        live.enqueue("t1")
        leases = Leaser("w", 30).fill(2, [gone, live])
        assert leases is not None
        assert [(x.broker.queue, [t.task_id for t in x.batch.tasks]) for x in leases.taken] \
            == [("live", ["t1"])]
        with pytest.raises(BrokerError):
            Leaser("w", 30).fill(2, [gone])

    def test_is_logged_as_skipped_only_when_another_queue_went_on(
        self, client: redis.Redis, caplog: pytest.LogCaptureFixture
    ) -> None:
        gone = Broker(connect(Settings.from_env(
            {}, redis_url=f"redis://127.0.0.1:{free_port()}/0", redis_timeout_seconds=0.5)),
            "gone")
        live = Broker(client, "live")
        live.enqueue("t1")
        with caplog.at_level("INFO", logger="taskq.worker"):
            Leaser("w", 30).fill(2, [live, gone])
            with pytest.raises(BrokerError):
                Leaser("w", 30).fill(2, [gone])
        said = [r.getMessage() for r in caplog.records if "lease from queue" in r.getMessage()]
        assert len(said) == 1
        assert said[0].startswith("lease from queue 'gone' failed; the other queues went on: ")


class TestInProcess:
    def test_queues_must_be_a_list_or_a_mapping_of_weights(self, app: App) -> None:
        with pytest.raises(ConfigError, match="a list of names or a mapping"):
            Worker(app, queues="high,low")

    @pytest.mark.parametrize("queues", [["a", "bad name"], {"a": 1, "": 2}])
    def test_a_queue_name_no_queue_can_have_is_a_config_error_as_every_other(
        self, app: App, queues: QueueChoice
    ) -> None:
        """It came as the InvalidTaskError of a task's queue."""
        with pytest.raises(ConfigError, match=r"^queues: invalid queue name"):
            Worker(app, queues=queues)

    def test_tasks_of_every_queue_run_and_settle_on_their_own_queue(
        self, app: App, other: Broker, start_worker: StartWorker, client: redis.Redis
    ) -> None:
        seen: list[tuple[str, str]] = []

        @app.task("where")
        def where(n: int) -> int:
            seen.append((current_task().queue, current_task().task_id))
            return n

        # The same task id on both queues: two tasks, each held and acked apart.
        app.broker.enqueue("same", name="where", payload={"args": [1], "kwargs": {}})
        other.enqueue("same", name="where", payload={"args": [2], "kwargs": {}})
        mine = [where.enqueue(n).task_id for n in range(5)]
        theirs = [send(other, "where", n) for n in range(5)]
        start_worker(concurrency=3, queues=[app.queue, other.queue])
        for broker, task_ids in ((app.broker, [*mine, "same"]), (other, [*theirs, "same"])):
            for task_id in task_ids:
                wait_for_state(broker, task_id, "completed")
        assert app.handle("same").result(timeout=5) == 1
        assert other.handle("same").result(timeout=5) == 2
        assert sorted(seen) == sorted([(app.queue, t) for t in [*mine, "same"]]
                                      + [(other.queue, t) for t in [*theirs, "same"]])
        for broker in (app.broker, other):
            assert broker.counts().leased == 0
            log = events(client, broker.keys)
            assert [e.type for e in log if e.task == "same"] == ["enqueued", "leased",
                                                               "completed"]

    def test_strict_order_leases_all_of_the_first_queue_before_any_of_the_next(
        self, app: App, other: Broker, start_worker: StartWorker
    ) -> None:
        @app.task("pause")
        def pause() -> None:
            time.sleep(0.01)

        # Enqueued before the worker starts: both queues are full from its first turn.
        low = [send(other, "pause") for _ in range(20)]
        high = [pause.enqueue().task_id for _ in range(20)]
        start_worker(concurrency=3, queues=[app.queue, other.queue])
        done = [wait_for_state(app.broker, t, "completed") for t in high] \
            + [wait_for_state(other, t, "completed") for t in low]
        high_leased = [r.leased_at for r in done[:20]]
        low_leased = [r.leased_at for r in done[20:]]
        # Redis time in ms: the last of high and the first of low may share a turn, and
        # so a millisecond, but no task of low was leased before one of high.
        assert max(high_leased) <= min(low_leased)

    def test_weights_give_each_queue_its_share_of_leases_and_starve_none(
        self, app: App, other: Broker, start_worker: StartWorker
    ) -> None:
        order: list[str] = []
        lock = threading.Lock()

        @app.task("tally")
        def tally() -> None:
            with lock:
                order.append(current_task().queue)

        high = [tally.enqueue().task_id for _ in range(150)]
        low = [send(other, "tally") for _ in range(150)]
        # One slot: each turn leases one task, from the queue the weights put first.
        start_worker(concurrency=1, queues={app.queue: 3, other.queue: 1})
        for task_id in low:
            wait_for_state(other, task_id, "completed")
        for task_id in high:
            wait_for_state(app.broker, task_id, "completed")
        # While both queues had work (the first 160 leases: high cannot run out before
        # 150 of them were its own), high's share is about 3/4, and low was never left
        # waiting long.
        first = order[:160]
        assert 0.65 <= first.count(app.queue) / len(first) <= 0.85
        longest_wait = max(len(run) for run in "".join(
            "h" if q == app.queue else "l" for q in first).split("l"))
        assert longest_wait <= 6

    def test_an_idle_worker_is_woken_by_work_on_any_of_its_queues(
        self, app: App, other: Broker, start_worker: StartWorker
    ) -> None:
        @app.task("nothing")
        def nothing() -> None:
            pass

        # A poll (and a waker timeout) far longer than the wait below: only a wake-up on
        # the second queue's wake list can start the task in time.
        running = start_worker(queues=[app.queue, other.queue], poll_seconds=60.0,
                               redis_timeout_seconds=130.0)
        wait_until(lambda: all(w.armed.is_set() for w in running.worker.wakers), 5,
                   "the worker to go idle")
        task_id = send(other, "nothing")
        wait_for_state(other, task_id, "completed", timeout=10)

    def test_leases_on_each_queue_are_renewed_by_heartbeats(
        self, app: App, other: Broker, start_worker: StartWorker, client: redis.Redis
    ) -> None:
        @app.task("long")
        def long() -> None:
            time.sleep(2.0)

        mine, theirs = long.enqueue().task_id, send(other, "long")
        start_worker(concurrency=2, queues=[app.queue, other.queue], lease_seconds=0.6)
        for broker, task_id in ((app.broker, mine), (other, theirs)):
            record = wait_for_state(broker, task_id, "completed", timeout=8)
            # Leased once and never again: the record keeps that one lease's token.
            assert record.retries == 0
            assert minted(client, broker.keys, task_id) == [("leased", record.fencing_token)]
            types = event_types(client, broker.keys, task_id)
            assert "reaped" not in types and types.count("heartbeat") >= 3

    def test_failures_retry_and_die_on_their_own_queue(
        self, app: App, other: Broker, start_worker: StartWorker
    ) -> None:
        @app.task("broken")
        def broken() -> None:
            raise RuntimeError("no")

        task_id = send(other, "broken", max_retries=1)
        start_worker(queues=[app.queue, other.queue])
        dead = wait_for_state(other, task_id, "dead")
        assert dead.retries == 1 and dead.error_type == "RuntimeError"
        assert other.dead() == [task_id] and app.broker.dead() == []

    def test_a_cancel_reaches_a_running_task_of_the_second_queue(
        self, app: App, other: Broker, start_worker: StartWorker
    ) -> None:
        @app.task("steps")
        def steps() -> None:
            while not current_task().cancelled:
                time.sleep(0.02)

        task_id = send(other, "steps")
        start_worker(queues=[app.queue, other.queue], lease_seconds=0.6)
        wait_for_state(other, task_id, "running")
        assert other.cancel(task_id).outcome == "requested"
        wait_for_state(other, task_id, "cancelled")

    def test_delays_and_rate_limits_are_kept_on_every_queue(
        self, app: App, other: Broker, start_worker: StartWorker, client: redis.Redis
    ) -> None:
        @app.task("limited", rate_limit="5/s")
        def limited() -> None:
            pass

        later = [send(broker, "limited", delay=0.3) for broker in (app.broker, other)]
        burst = [send(other, "limited") for _ in range(3)]
        start_worker(concurrency=3, queues=[app.queue, other.queue])
        for broker, task_id in zip((app.broker, other), later, strict=True):
            record = wait_for_state(broker, task_id, "completed")
            assert record.leased_at >= record.run_at
        for task_id in burst:
            wait_for_state(other, task_id, "completed")
        # Three starts at once at 5/s with a burst of 1: the second queue's broker applied
        # the app's limit, throttling two of them.
        throttled = {e.task for e in events(client, other.keys) if e.type == "throttled"}
        assert throttled & set(burst)

    def test_concurrency_limits_are_kept_on_every_queue(
        self, app: App, other: Broker, start_worker: StartWorker
    ) -> None:
        guard, running, peak = threading.Lock(), [0], [0]

        @app.task("alone", max_concurrency=1)
        def alone() -> None:
            with guard:
                running[0] += 1
                peak[0] = max(peak[0], running[0])
            time.sleep(0.05)
            with guard:
                running[0] -= 1

        task_ids = [send(other, "alone") for _ in range(4)]
        start_worker(concurrency=4, queues=[app.queue, other.queue])
        for task_id in task_ids:
            wait_for_state(other, task_id, "completed")
        # Four free slots and four ready tasks: only the second queue's broker applying
        # the app's limit keeps them to one at a time.
        assert peak[0] == 1

    def test_the_apps_schedules_fire_on_its_own_queue_only(
        self, app: App, other: Broker, start_worker: StartWorker, client: redis.Redis
    ) -> None:
        tick_every_200_ms(app)
        start_worker(queues=[other.queue, app.queue])
        wait_until(lambda: len(scheduled(client, app.broker, "completed")) >= 2, 10,
                   "two ticks to run")
        assert scheduled(client, other, "enqueued") == []

    def test_workers_dividing_the_queues_fire_each_tick_once_on_the_apps_queue(
        self, app: App, other: Broker, start_worker: StartWorker, client: redis.Redis
    ) -> None:
        tick_every_200_ms(app)
        start_worker(queues=[other.queue])  # does not serve the app's queue: fires there
        start_worker(queues=[app.queue])
        wait_until(lambda: len(scheduled(client, app.broker, "enqueued")) >= 5, 10,
                   "five ticks to fire")
        assert scheduled(client, other, "enqueued") == []
        # One task per tick: a tick's task id is the schedule and the tick, so a second
        # firing of a tick on the same queue would not be a second task; one on another
        # queue would be, and there is none.
        fired = scheduled(client, app.broker, "enqueued")
        assert len(set(fired)) == len(fired)


def tick_every_200_ms(app: App) -> None:
    @app.periodic(every=timedelta(milliseconds=200))
    @app.task("tick")
    def tick() -> None:
        pass


def scheduled(client: redis.Redis, broker: Broker, kind: str) -> list[str]:
    """The ids of schedules' tasks in `broker`'s log, one per event of `kind`."""
    return [e.fields["task"] for e in events(client, broker.keys)
            if e.type == kind and e.fields.get("task", "").startswith("sched:")]

@pytest.mark.processes
class TestProcesses:
    def test_a_worker_on_two_queues_runs_both_and_drains_both_on_sigterm(
        self, workers: WorkerProcesses, queue: Broker, other: Broker
    ) -> None:
        worker = workers.start("--queue", f"{queue.queue},{other.queue}",
                               TASKQ_CONCURRENCY="2", WORK_SECONDS="0.05")
        quick = [(b, b.enqueue(uuid.uuid4().hex, payload=CHARGE).task_id)
                 for b in (queue, other) for _ in range(3)]
        for broker, task_id in quick:
            wait_for_state(broker, task_id, "completed")
        log = workers.log(worker)
        assert f"on queues {queue.queue!r}, {other.queue!r} (strict order)" in log
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(10) == 0
        # Again, each queue's task in hand when SIGTERM comes: both run to the end.
        worker = workers.start("--queue", f"{queue.queue},{other.queue}",
                               TASKQ_CONCURRENCY="2", WORK_SECONDS="1")
        held = [(b, b.enqueue(uuid.uuid4().hex, payload=CHARGE).task_id)
                for b in (queue, other)]
        for broker, task_id in held:
            wait_for_state(broker, task_id, "running")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(10) == 0
        for broker, task_id in held:
            record = record_of(broker, task_id)
            assert record.state == "completed"  # on its one lease: no other minted a token
            assert minted(broker.client, broker.keys, task_id) == [
                ("leased", record.fencing_token)]
        assert "draining (SIGTERM)" in workers.log(worker)

    def test_a_killed_workers_tasks_are_reaped_each_on_its_own_queue(
        self, workers: WorkerProcesses, queue: Broker, other: Broker
    ) -> None:
        both = f"{queue.queue},{other.queue}"
        killed = workers.start("--queue", both, TASKQ_CONCURRENCY="2", WORK_SECONDS="30")
        held = [(b, b.enqueue(uuid.uuid4().hex, payload=CHARGE).task_id)
                for b in (queue, other)]
        for broker, task_id in held:
            wait_for_state(broker, task_id, "running")
        killed.send_signal(signal.SIGKILL)
        killed.wait(5)
        # Another worker, with the queues the other way round, takes both back.
        workers.start("--queue", f"{other.queue}:1,{queue.queue}:1", TASKQ_CONCURRENCY="2",
                      WORK_SECONDS="0.05")
        for broker, task_id in held:
            record: TaskRecord = wait_for_state(broker, task_id, "completed", timeout=20)
            assert record.retries == 1
            # Leased, reaped, leased: each step minted a token above the one before, and
            # the record holds the last.
            steps = minted(broker.client, broker.keys, task_id)
            assert [kind for kind, _ in steps] == ["leased", "reaped", "leased"]
            first, reaped, second = (token for _, token in steps)
            assert first < reaped < second == record.fencing_token
            assert "reaped" in event_types(broker.client, broker.keys, task_id)
