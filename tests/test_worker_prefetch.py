"""A worker's prefetch: tasks leased ahead of a free handler, started the moment one is."""

from __future__ import annotations

import asyncio
import threading
import time

import redis

from helpers import minted
from taskq import App, Task
from taskq.registry import read_workers
from waiting import event_types, wait_for_state, wait_until
from worker_support import StartWorker, WorkerThread


def lease_tokens(client: redis.Redis, app: App, task_id: str) -> list[int]:
    """The tokens the task's leases were given, oldest first, as their events tell."""
    return [token for kind, token in minted(client, app.broker.keys, task_id)
            if kind == "leased"]


class Running:
    """How many handlers run at once, and the most that ever did."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now = self.most = 0
        self.started: list[str] = []

    def enter(self, name: str) -> None:
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)
            self.started.append(name)

    def leave(self) -> None:
        with self._lock:
            self.now -= 1


def holding_task(app: App, name: str, running: Running, go: threading.Event) -> Task[..., None]:
    """A task that counts itself running until `go` is set."""

    def hold(tag: str) -> None:
        running.enter(tag)
        go.wait(10)
        running.leave()

    return app.task(name)(hold)


def leased(client: redis.Redis, app: App) -> int:
    return int(client.zcard(app.broker.keys.leased))


def context_of(running: WorkerThread, task_id: str) -> object:
    return next((c for c in running.worker.slots.in_hand() if c.task_id == task_id), None)


class TestPrefetch:
    def test_a_worker_holds_its_prefetch_in_hand_but_runs_only_its_concurrency(
        self, app: App, start_worker: StartWorker, client: redis.Redis
    ) -> None:
        running, go = Running(), threading.Event()

        hold = holding_task(app, "hold", running, go)

        ids = [hold.enqueue(str(i)).task_id for i in range(8)]
        start_worker(concurrency=2, prefetch=3)
        wait_until(lambda: running.now == 2 and leased(client, app) == 5, what="5 leased")
        # Its registry entry counts its slots as its concurrency and its prefetch (2 + 3).
        wait_until(lambda: [(w.in_hand, w.concurrency) for w in read_workers(app.broker)[1]]
                   == [(5, 5)], what="a beat registering 5 of 5 slots in hand")
        go.set()
        for task_id in ids:
            wait_for_state(app.broker, task_id, "completed")
        assert running.most == 2

    def test_async_handlers_wait_for_a_free_handler_too(
        self, app: App, start_worker: StartWorker, client: redis.Redis
    ) -> None:
        running, go = Running(), threading.Event()

        @app.task("hold_async")
        async def hold_async(name: str) -> None:
            running.enter(name)
            while not go.is_set():
                await asyncio.sleep(0.01)
            running.leave()

        ids = [hold_async.enqueue(str(i)).task_id for i in range(8)]
        start_worker(concurrency=2, prefetch=3)
        wait_until(lambda: running.now == 2 and leased(client, app) == 5, what="5 leased")
        go.set()
        for task_id in ids:
            wait_for_state(app.broker, task_id, "completed")
        assert running.most == 2

    def test_a_prefetched_tasks_time_limit_counts_from_its_start(
        self, app: App, start_worker: StartWorker
    ) -> None:
        go = threading.Event()

        @app.task("first")
        def first() -> None:
            go.wait(10)

        @app.task("limited", time_limit=0.5)
        def limited() -> str:
            return "in time"

        blocker = first.enqueue().task_id
        waiting = limited.enqueue(max_retries=0).task_id
        running = start_worker(concurrency=1, prefetch=1)
        wait_until(lambda: context_of(running, waiting), what="the limited task in hand")
        threading.Timer(0.8, go.set).start()  # it waits past its own limit for a handler
        wait_for_state(app.broker, blocker, "completed")
        record = wait_for_state(app.broker, waiting, "completed")
        assert record.result == '"in time"'

    def test_a_task_cancelled_while_it_waits_for_a_handler_never_starts(
        self, app: App, start_worker: StartWorker, client: redis.Redis
    ) -> None:
        running, go = Running(), threading.Event()

        step = holding_task(app, "step", running, go)

        blocker = step.enqueue("blocker").task_id
        victim = step.enqueue("victim")
        worker = start_worker(concurrency=1, prefetch=1, lease_seconds=0.9)
        wait_until(lambda: running.now == 1 and leased(client, app) == 2, what="both leased")
        assert victim.cancel().outcome == "requested"
        wait_until(lambda: getattr(context_of(worker, victim.task_id), "cancelled", False),
                   what="the heartbeat telling the waiting task of its cancel")
        go.set()
        wait_for_state(app.broker, blocker, "completed")
        wait_for_state(app.broker, victim.task_id, "cancelled")
        assert running.started == ["blocker"]

    def test_a_stopping_worker_hands_back_at_once_the_tasks_it_had_not_started(
        self, app: App, start_worker: StartWorker, client: redis.Redis
    ) -> None:
        running, go = Running(), threading.Event()

        step = holding_task(app, "step", running, go)

        first, *waiting = (step.enqueue(name).task_id for name in "abcd")
        worker = start_worker(concurrency=1, prefetch=3)
        wait_until(lambda: running.now == 1 and leased(client, app) == 4, what="all leased")
        worker.worker.stop("the test stops it")
        for task_id in waiting:  # while the started one is still running
            record = wait_for_state(app.broker, task_id, "pending")
            # Leased once and handed back: the release keeps the lease's token.
            assert lease_tokens(client, app, task_id) == [record.fencing_token]
            assert event_types(client, app.broker.keys, task_id)[-1] == "released"
        # Back at the front of ready in the order they waited (a lease pops the tail).
        assert client.lrange(app.broker.keys.ready, 0, -1)[::-1] == waiting
        assert running.now == 1
        go.set()
        worker.thread.join(10)
        assert worker.status == 0
        completed = wait_for_state(app.broker, first, "completed")
        assert lease_tokens(client, app, first) == [completed.fencing_token]  # its one lease
        assert running.started == ["a"]


    def test_runs_cut_off_at_the_grace_go_back_in_the_order_they_waited(
        self, app: App, start_worker: StartWorker, client: redis.Redis
    ) -> None:
        """Released oldest first, each to the front of ready, they came back newest
        first: a stop inverted the order four waiting tasks would run in."""
        running, go = Running(), threading.Event()

        step = holding_task(app, "step", running, go)

        ids = [step.enqueue(name).task_id for name in "abcd"]
        worker = start_worker(concurrency=4, prefetch=0, shutdown_grace_seconds=0.2)
        try:
            wait_until(lambda: running.now == 4, what="all four running")
            worker.worker.stop("the test stops it")
            worker.thread.join(10)
            assert client.lrange(app.broker.keys.ready, 0, -1)[::-1] == ids
        finally:
            go.set()


class TestHeldOutcomes:
    def test_with_a_backlog_quick_runs_are_settled_many_to_a_call(
        self, app: App, start_worker: StartWorker, client: redis.Redis
    ) -> None:
        """Each outcome waking the loop would settle about one run a script call, as a
        handler that waits on I/O lets the loop run between its runs; held until half
        the backlog is used up, they go many to a call."""
        noop = app.task("noop")(lambda n: time.sleep(0.0005))
        ids = [r.task_id for r in noop.enqueue_many([noop.call(n) for n in range(400)])]
        client.config_resetstat()
        start_worker(concurrency=1, prefetch=32)
        for task_id in ids:
            wait_for_state(app.broker, task_id, "completed")
        calls = int(client.info("commandstats")["cmdstat_evalsha"]["calls"])
        # About one in three here (the turns' maintenance calls included); two a run
        # when each outcome wakes the loop.
        assert calls < len(ids), f"{calls} script calls for {len(ids)} runs"

    def test_a_held_outcome_is_settled_while_the_handler_is_busy_with_the_backlog(
        self, app: App, start_worker: StartWorker
    ) -> None:
        """A finished run's outcome does not wait for the handler's next long run: the
        loop looks at the held ones within HOLD_SECONDS, however long its poll."""
        running, go = Running(), threading.Event()
        quick = app.task("quick")(lambda: "done")
        step = holding_task(app, "step", running, go)
        first = quick.enqueue().task_id
        blocked = [step.enqueue(str(n)).task_id for n in range(8)]
        start_worker(concurrency=1, prefetch=8, poll_seconds=30)
        try:
            wait_until(lambda: running.now == 1, what="the handler busy with a long run")
            assert wait_for_state(app.broker, first, "completed", timeout=2).result == '"done"'
        finally:
            go.set()
        for task_id in blocked:
            wait_for_state(app.broker, task_id, "completed")
