"""Workflows as users write them (taskq.canvas): chains, groups and chords run by a real
worker on a real Redis, their handles, their failure policies, and the bad input they
refuse before anything is sent."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import signal
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import redis

from helpers import events, leased_token, strict_mypy_errors, view
from taskq import (
    App,
    InvalidTaskError,
    Retry,
    TaskCancelledError,
    UpstreamFailed,
    chain,
    current_task,
    failure_of,
    group,
)
from taskq.broker import Broker
from taskq.codec import MAX_DEPTH
from taskq.errors import ConfigError, ResultTimeoutError, TaskNotFoundError
from taskq.flows import Flows, FlowStatus
from taskq.settings import Settings, Simulation
from taskq.tools.chaos.flows import build, expected, flow_tasks, triggers_expected
from taskq.tools.ledger import Ledger
from taskq.tools.tracecheck import read_log, validate
from waiting import WorkerProcesses, wait_until
from worker_support import StartWorker, WorkerThread

Tasks = dict[str, Any]


def add(x: int, y: int = 1) -> int:
    return x + y


def total(xs: list[int]) -> int:
    return sum(xs)


def boom(x: int) -> int:
    raise ValueError(f"no {x}")


def failed_places(xs: list[Any]) -> list[int]:
    return [n for n, x in enumerate(xs) if failure_of(x) is not None]


def until_cancelled(x: int) -> int:
    """Runs until its cancel is heard (a cancel, or its time limit)."""
    while not current_task().cancelled:
        time.sleep(0.02)
    return x


def deaf(x: int) -> int:
    """Runs for 4 s whatever it is told: it never looks at its cancel."""
    time.sleep(4)
    return x


def flaky(x: int) -> int:
    if current_task().attempt == 1:
        raise Retry(delay=0)
    return x * 2


# Each task's function and registration options.
TASKS: dict[str, tuple[Any, dict[str, Any]]] = {
    "add": (add, {}), "total": (total, {}), "boom": (boom, {"max_retries": 0}),
    "failed_places": (failed_places, {}), "wait": (until_cancelled, {}),
    "stuck": (until_cancelled, {"max_retries": 0, "time_limit": 0.2}),
    "flaky": (flaky, {"max_retries": 2}), "paced": (add, {"rate_limit": "20/s"}),
    "deaf": (deaf, {}),
}


class CountedFlows(Flows):
    """The queue's workflow scripts, counting the reads of a whole workflow."""

    def __init__(self, broker: Broker) -> None:
        super().__init__(broker)
        self.whole_reads = 0

    def status(self, flow_id: str) -> FlowStatus | None:
        self.whole_reads += 1
        return super().status(flow_id)


@pytest.fixture
def tasks(app: App) -> Tasks:
    """TASKS registered on the test's app, to build workflows of."""
    return {name: app.task(name, **options)(fn) for name, (fn, options) in TASKS.items()}


class TestChains:
    def test_each_steps_result_is_the_next_steps_first_argument(
        self, tasks: Tasks, start_worker: StartWorker
    ) -> None:
        add = tasks["add"]
        start_worker(concurrency=2)
        flow = chain(add.s(1), add.s(10), add.s(y=100)).enqueue()
        assert flow.created
        assert flow.result(timeout=10) == 112
        assert [s.state for s in flow.status().steps] == ["completed"] * 3
        assert flow.step(2).result(timeout=1) == 12

    def test_a_chain_inside_a_chain_is_flattened_and_a_group_hands_on_its_list(
        self, tasks: Tasks, start_worker: StartWorker
    ) -> None:
        add, total = tasks["add"], tasks["total"]
        start_worker(concurrency=4)
        flow = chain(add.s(1), chain(group(add.s(), add.s(y=5)), total.s())).enqueue()
        status = flow.status()
        assert [len(status.stage_steps(k)) for k in (1, 2, 3)] == [1, 2, 1]
        assert status.groups == (False, True, False)
        assert flow.result(timeout=10) == (2 + 1) + (2 + 5)

    def test_a_result_nested_as_deep_as_a_result_may_be_is_handed_on_through_a_group(
        self, app: App, start_worker: StartWorker
    ) -> None:
        """Handed on, it sits in the next step's payload and a group's list: three
        levels deeper than any result may be written, and still read."""
        @app.task("nest")
        def nest(levels: int) -> list[Any]:
            value: list[Any] = [0]
            for _ in range(levels - 1):
                value = [value]
            return value

        @app.task("depth")
        def depth(values: list[Any]) -> int:
            levels = 0
            while isinstance(values, list) and values:
                values, levels = values[0], levels + 1
            return levels

        start_worker(concurrency=2)
        flow = chain(group(nest.s(MAX_DEPTH), nest.s(2)), depth.s()).enqueue()
        assert flow.result(timeout=10) == MAX_DEPTH + 1

    def test_a_retried_step_hands_on_the_result_of_its_accepted_run(
        self, tasks: Tasks, start_worker: StartWorker
    ) -> None:
        start_worker()
        flow = chain(tasks["flaky"].s(3), tasks["add"].s()).enqueue()
        assert flow.result(timeout=10) == 7
        assert flow.status().steps[0].retries == 1

    def test_a_dead_step_ends_the_chain_with_its_error_on_every_later_handle(
        self, tasks: Tasks, start_worker: StartWorker
    ) -> None:
        add, boom = tasks["add"], tasks["boom"]
        start_worker()
        flow = chain(add.s(1), boom.s(), add.s(), add.s()).enqueue()
        with pytest.raises(UpstreamFailed) as failed:
            flow.result(timeout=10)
        dead = f"{flow.flow_id}.2.1"
        assert failed.value.upstream == dead
        assert failed.value.error_type == "ValueError"
        assert failed.value.task_id == flow.flow_id
        assert str(failed.value).startswith(f"workflow {flow.flow_id} failed: ")
        assert f"{dead} (dead: ValueError: no 2)" in str(failed.value)
        for stage in (3, 4):
            with pytest.raises(UpstreamFailed, match="no 2") as skipped:
                flow.step(stage).result(timeout=1)
            assert skipped.value.upstream == dead
        status = flow.status()
        assert status.state == "failed"
        assert [s.state for s in status.steps] == ["completed", "dead", "cancelled",
                                                   "cancelled"]


    def test_a_step_cut_off_at_shutdown_after_its_effect_fails_the_chain(
        self, app: App, tasks: Tasks, start_worker: StartWorker
    ) -> None:
        """Acked, not run again (its effect would apply twice), but with no result to hand
        on: the chain fails there rather than run its next step on a made-up None."""
        applied, leave = threading.Event(), threading.Event()
        tokens: list[int] = []

        @app.task("charge_then_linger")
        def charge_then_linger(x: int) -> int:
            tokens.append(current_task().token)
            with current_task().effect():
                applied.set()
            leave.wait(10)
            return x * 10

        running = start_worker(shutdown_grace_seconds=0.3)
        flow = chain(charge_then_linger.s(3), tasks["add"].s(100)).enqueue()
        assert applied.wait(5)
        running.stop()
        leave.set()
        cut = f"{flow.flow_id}.1.1"
        with pytest.raises(UpstreamFailed) as failed:
            flow.result(timeout=10)
        assert (failed.value.upstream, failed.value.error_type) == (
            cut, "taskq.errors.NoResultError")
        assert f"{cut} (cut: taskq.errors.NoResultError: its handler was cut off" in str(
            failed.value)
        assert [s.state for s in flow.status().steps] == ["completed", "cancelled"]
        record = app.broker.task(cut)
        # Acked with the token of its one run: no lease or reap minted another after it.
        assert record is not None and (record.state, record.fencing_token) == (
            "completed", leased_token(0, tokens[0]))
        assert len(tokens) == 1  # not run again


class TestGroups:
    def test_a_chords_callback_gets_every_result_in_the_order_given(
        self, tasks: Tasks, start_worker: StartWorker
    ) -> None:
        add, total = tasks["add"], tasks["total"]
        start_worker(concurrency=4)
        values = group(add.s(n, y=0) for n in range(20)).enqueue().result(timeout=10)
        assert values == list(range(20))
        assert group(add.s(n) for n in range(20)).then(total.s()).enqueue().result(
            timeout=10) == sum(range(1, 21))

    def test_a_dead_member_fails_the_callback_with_the_members_errors(
        self, tasks: Tasks, start_worker: StartWorker
    ) -> None:
        add, boom, total = tasks["add"], tasks["boom"], tasks["total"]
        start_worker(concurrency=2)
        flow = group(add.s(1), boom.s(2), boom.s(3)).then(total.s()).enqueue()
        with pytest.raises(UpstreamFailed) as failed:
            flow.step(2).result(timeout=10)
        message = str(failed.value)
        assert "2 of 3 steps of stage 1 did not complete" in message
        assert "no 2" in message and "no 3" in message

    def test_under_partial_the_callback_runs_with_each_failure_in_its_place(
        self, tasks: Tasks, start_worker: StartWorker
    ) -> None:
        add, boom = tasks["add"], tasks["boom"]
        start_worker(concurrency=2)
        members = group(add.s(1), boom.s(2), add.s(3), on_member_failure="partial")
        assert members.then(tasks["failed_places"].s()).enqueue().result(timeout=10) == [1]
        values = group(add.s(1), boom.s(2), on_member_failure="partial").enqueue().result(
            timeout=10)
        failure = failure_of(values[1])
        assert values[0] == 2 and failure is not None
        assert (failure.state, failure.error_type, failure.error) == (
            "dead", "ValueError", "no 2")
        assert failure_of({"taskq_failed": 1}) is None and failure_of(2) is None

    def test_a_callback_whose_joined_input_is_over_the_payload_limit_never_runs(
        self, app: App, settings: Settings, client: redis.Redis
    ) -> None:
        # Each member's result fits; the three of them handed on as one argument do not.
        small = App(queue=app.queue,
                    settings=dataclasses.replace(settings, max_payload_bytes=1000))
        ran: list[int] = []

        @small.task("text")
        def text(n: int) -> str:
            return str(n) * 400

        @small.task("count")
        def count(parts: list[str]) -> int:
            ran.append(len(parts))
            return len(parts)

        worker = WorkerThread(small, small.settings, 2)
        try:
            assert group(text.s(1), text.s(2)).then(count.s()).enqueue().result(10) == 2
            flow = group(text.s(1), text.s(2), text.s(3)).then(count.s(), count.s()).enqueue()
            with pytest.raises(UpstreamFailed) as failed:
                flow.result(timeout=10)
        finally:
            worker.close(client)
        callback = f"{flow.flow_id}.2.1"
        assert failed.value.upstream == callback
        assert failed.value.error_type == "taskq.errors.PayloadTooLargeError"
        assert (f"the input of stage 2, what stage 1 handed on (1210 bytes), would make "
                f"the payload of step {callback} 1233 bytes, over the limit of 1000 bytes "
                "(TASKQ_MAX_PAYLOAD_BYTES); no step of stage 2 ran") in str(failed.value)
        assert [s.state for s in flow.status().steps] == ["completed"] * 3 + ["cancelled"] * 2
        assert ran == [2]  # only the first workflow's callback
        with pytest.raises(UpstreamFailed, match="over the limit of 1000 bytes"):
            flow.step(3).result(timeout=1)
        kinds = [(e.type, e.task) for e in events(client, small.broker.keys)]
        assert ("triggered", callback) not in kinds
        assert view(client, small.broker.keys).violations() == []


class TestPerStep:
    def test_a_steps_time_limit_kills_it_and_fails_the_flow_with_that_error(
        self, tasks: Tasks, start_worker: StartWorker
    ) -> None:
        start_worker()
        flow = chain(tasks["add"].s(1), tasks["stuck"].s(), tasks["add"].s()).enqueue()
        with pytest.raises(UpstreamFailed, match="ran past its time limit") as failed:
            flow.result(timeout=10)
        assert failed.value.error_type == "taskq.errors.TimeLimitExceeded"

    def test_a_rate_limited_step_waits_its_turn_and_each_step_keeps_its_priority(
        self, tasks: Tasks, app: App, client: redis.Redis, start_worker: StartWorker
    ) -> None:
        paced = tasks["paced"]
        flow = group(paced.s(n, priority=9 if n == 5 else 2) for n in range(6)).then(
            tasks["total"].s(priority=7)).enqueue()
        start_worker()
        assert flow.result(timeout=10) == sum(range(1, 7))
        log = events(client, app.broker.keys)
        assert any(e.type == "throttled" for e in log)
        leased = [e.task for e in log if e.type == "leased"]
        assert leased[0] == f"{flow.flow_id}.1.6"  # the highest priority went first
        given = {e.task: e.fields.get("priority") for e in log if e.type == "enqueued"}
        assert given[f"{flow.flow_id}.2.1"] == "7"


class TestHandles:
    def test_starting_the_same_flow_id_again_starts_nothing(
        self, tasks: Tasks, app: App, client: redis.Redis
    ) -> None:
        add = tasks["add"]
        first = chain(add.s(1), add.s()).enqueue(flow_id="nightly-2026-12-02")
        again = chain(add.s(5), add.s(), add.s()).enqueue(flow_id="nightly-2026-12-02")
        assert (first.created, again.created) == (True, False)
        assert len(again.status().steps) == 2
        assert app.workflow("nightly-2026-12-02").status().steps[0].state == "pending"

    def test_a_coroutine_starts_a_flow_and_awaits_its_result_while_its_loop_runs(
        self, tasks: Tasks, start_worker: StartWorker
    ) -> None:
        start_worker()

        async def main() -> tuple[Any, int]:
            ticks = 0

            async def tick() -> None:
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.01)
                    ticks += 1

            ticker = asyncio.create_task(tick())
            flow = await chain(tasks["wait"].s(1), tasks["add"].s()).enqueue_async()
            assert (await flow.status_async()).state == "running"
            await asyncio.sleep(0.2)
            assert (await flow.cancel_async()).outcome == "cancelled"
            with pytest.raises(TaskCancelledError):
                await flow.result_async(timeout=5)
            ticker.cancel()
            second = await group(tasks["add"].s(1)).enqueue_async()
            await tasks["add"].app.aclose()
            return second, ticks

        flow, ticks = asyncio.run(main())
        assert flow.result(timeout=5) == [2] and ticks > 5

    def test_coroutines_await_many_workflows_at_once_without_a_thread(
        self, tasks: Tasks, app: App, start_worker: StartWorker
    ) -> None:
        """A loop's default pool has a few threads (6 on 2 cores): waits held on them
        would queue behind each other, so here the pool refuses any use at all."""
        start_worker(concurrency=4)
        add, wait = tasks["add"], tasks["wait"]

        async def main() -> tuple[list[Any], list[str], Any]:
            asyncio.get_running_loop().set_default_executor(NoThreads())
            held = await chain(wait.s(7), add.s()).enqueue_async()
            flows = [await chain(add.s(n), add.s()).enqueue_async() for n in range(20)]
            results = await asyncio.gather(*(f.result_async(timeout=20) for f in flows))
            found = app.workflow_async(held.flow_id)
            states = [(await found.status_async()).state,
                      await found.step(1).status_async()]
            waiting = asyncio.create_task(found.result_async(timeout=20))
            await asyncio.sleep(0.1)
            states.append((await found.cancel_async()).outcome)
            with pytest.raises(TaskCancelledError):
                await waiting
            late = await found.step(2).status_async()
            await app.aclose()
            return results, states, late

        results, states, late = asyncio.run(main())
        assert results == [n + 2 for n in range(20)]
        assert states == ["running", "running", "cancelled"]
        assert late == "cancelled"

    def test_a_sharded_app_refuses_workflows_from_coroutines_too(
        self, settings: Settings, tasks: Tasks
    ) -> None:
        sharded = App(queue="sharded-flows", settings=dataclasses.replace(settings, shards=2))
        with pytest.raises(ConfigError, match="a workflow runs in one queue"):
            sharded.async_flows()
        with pytest.raises(ConfigError, match="a workflow runs in one queue"):
            sharded.workflow_async("any")

    def test_a_result_wait_times_out_and_an_unknown_flow_is_not_found(
        self, tasks: Tasks, app: App
    ) -> None:
        flow = chain(tasks["add"].s(1)).enqueue()
        with pytest.raises(ResultTimeoutError):
            flow.result(timeout=0.2)
        with pytest.raises(Exception, match="no workflow 'nope'"):
            app.workflow("nope").status()
        for stage, index in ((0, 1), (1, -1), ("1.1", 1), (1, 2.0), (True, 1)):
            with pytest.raises(InvalidTaskError, match=r"(stage|index) must be"):
                flow.step(stage, index)  # type: ignore[arg-type]

    def test_a_blocking_handle_awaited_counts_its_timeout_from_the_call(
        self, tasks: Tasks
    ) -> None:
        """As a task handle's: a wait that finds the loop's threads busy does not start
        its timeout only once one comes free."""
        first, second = (chain(tasks["add"].s(n)).enqueue() for n in (1, 2))

        async def both() -> float:
            asyncio.get_running_loop().set_default_executor(
                concurrent.futures.ThreadPoolExecutor(1))
            started = time.monotonic()
            ends = await asyncio.gather(first.result_async(timeout=2),
                                        second.result_async(timeout=2),
                                        return_exceptions=True)
            assert [type(end) for end in ends] == [ResultTimeoutError] * 2, ends
            return time.monotonic() - started

        assert asyncio.run(both()) < 3.5  # not 2 s for the first, then 2 s more

    def test_a_cancelled_await_of_a_blocking_handle_lets_its_thread_go(
        self, tasks: Tasks, app: App
    ) -> None:
        """As a task handle's: cancelled, the wait ends on its thread too, rather than
        hold one of the threads every `asyncio.to_thread` shares until the flow ends."""
        flow = chain(tasks["add"].s(1)).enqueue()  # no worker: it never ends

        async def cancel_waits_then_use_a_thread() -> int:
            asyncio.get_running_loop().set_default_executor(
                concurrent.futures.ThreadPoolExecutor(2))
            for _ in range(4):  # twice the executor's threads
                with pytest.raises(TimeoutError):
                    await asyncio.wait_for(flow.result_async(), 0.2)
            return await asyncio.wait_for(asyncio.to_thread(lambda: 42), 5)

        assert asyncio.run(cancel_waits_then_use_a_thread()) == 42
        wait_until(lambda: not any("b" in c["flags"]
                                   for c in app.broker.client.client_list()),
                   5, "the cancelled waits to leave Redis")

    def test_a_step_whose_record_expired_leaves_the_wait_to_the_others(
        self, app: App, start_worker: StartWorker
    ) -> None:
        release = threading.Event()

        @app.task("quick")
        def quick(x: int) -> int:
            return x

        @app.task("held")
        def held(x: int) -> int:
            release.wait(20)
            return x

        start_worker(concurrency=2)
        flow = group(quick.s(1, result_ttl=0.2), held.s(2)).enqueue()
        first = app.broker.keys.task(flow.step(1, 1).task_id)
        wait_until(lambda: not app.broker.client.exists(first), 10,
                   "the first step's record to expire")
        with pytest.raises(ResultTimeoutError, match=(
                rf"workflow {flow.flow_id} has not ended within 0.3s: "
                rf"step {flow.flow_id}\.1\.2 is running")):
            flow.result(timeout=0.3)
        release.set()
        assert flow.result(timeout=10) == [1, 2]

    def test_a_workflow_whose_running_steps_lost_their_records_is_not_waited_for(
        self, tasks: Tasks, app: App
    ) -> None:
        flow = group(tasks["add"].s(1), tasks["add"].s(2)).enqueue()
        for index in (1, 2):  # deleted by hand, or evicted, before any worker ran them
            app.broker.client.delete(app.broker.keys.task(flow.step(1, index).task_id))
        with pytest.raises(TaskNotFoundError, match="no step of its stage 1"):
            flow.result(timeout=1)


    def test_waiting_on_a_long_chain_reads_it_whole_only_at_its_start_and_end(
        self, tasks: Tasks, app: App, start_worker: StartWorker
    ) -> None:
        # Read whole at every stage, a chain of n stages cost n reads of n steps each:
        # 3,000 stages took 17 s of Redis's time to wait on, and slowed the chain 26x.
        add = tasks["add"]
        flow = chain(*[add.s(1) if n == 0 else add.s() for n in range(150)]).enqueue()
        counted = dataclasses.replace(flow, flows=CountedFlows(app.broker))
        start_worker()
        assert counted.result(timeout=60) == 151
        assert counted.flows.whole_reads <= 3

    def test_a_wait_under_way_ends_cancelled_while_a_step_that_ignores_it_still_runs(
        self, tasks: Tasks, start_worker: StartWorker
    ) -> None:
        deaf, add = tasks["deaf"], tasks["add"]
        start_worker()
        flow = chain(deaf.s(1), add.s()).enqueue()
        wait_until(lambda: flow.status().steps[0].state == "running")
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(flow.result, 30)
            time.sleep(0.3)  # the wait is under way, blocked on the running step
            assert flow.cancel().outcome == "cancelled"
            with pytest.raises(TaskCancelledError):
                waiting.result(timeout=10)
        # Seen by the flow's state, not by the end of the step, which runs on.
        assert flow.step(1).status() == "running"

    def test_an_awaited_wait_under_way_ends_cancelled_while_its_step_still_runs(
        self, tasks: Tasks, start_worker: StartWorker
    ) -> None:
        deaf, add = tasks["deaf"], tasks["add"]
        start_worker()

        async def main() -> str:
            flow = await chain(deaf.s(1), add.s()).enqueue_async()
            while (await flow.status_async()).steps[0].state != "running":
                await asyncio.sleep(0.05)
            waiting = asyncio.create_task(flow.result_async(30))
            await asyncio.sleep(0.3)
            assert (await flow.cancel_async()).outcome == "cancelled"
            with pytest.raises(TaskCancelledError):
                await asyncio.wait_for(waiting, 10)
            state = await flow.step(1).status_async()
            await deaf.app.aclose()
            return state

        assert asyncio.run(main()) == "running"


class NoThreads(concurrent.futures.ThreadPoolExecutor):
    """An event loop's default executor that fails whatever is handed to it."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        raise AssertionError(f"{fn!r} was sent to a thread")


class TestCancel:
    def test_cancelling_a_flow_stops_its_running_step_and_ends_the_rest(
        self, tasks: Tasks, app: App, client: redis.Redis, start_worker: StartWorker
    ) -> None:
        wait, add = tasks["wait"], tasks["add"]
        start_worker()
        flow = chain(wait.s(1), add.s(), add.s()).enqueue()
        wait_until(lambda: flow.status().steps[0].state == "running")
        done = flow.cancel()
        assert (done.outcome, done.ended, done.told) == ("cancelled", 2, 1)
        with pytest.raises(TaskCancelledError) as cancelled:
            flow.result(timeout=5)
        assert cancelled.value.task_id == flow.flow_id
        assert str(cancelled.value) == (f"workflow {flow.flow_id} was cancelled, so it has "
                                        "no result")
        wait_until(lambda: flow.step(1).status() == "cancelled", what="the run to stop")
        assert [s.state for s in flow.status().steps] == ["cancelled"] * 3
        assert flow.cancel().outcome == "unchanged"
        kinds = [e.type for e in events(client, app.broker.keys)]
        assert "triggered" not in kinds
        assert view(client, app.broker.keys).violations() == []

    def test_cancelling_one_waiting_step_fails_the_flow_when_its_stage_is_reached(
        self, tasks: Tasks, start_worker: StartWorker
    ) -> None:
        add = tasks["add"]
        flow = chain(add.s(1), group(add.s(), add.s()), add.s()).enqueue()
        assert flow.step(2, 2).cancel().outcome == "cancelled"
        start_worker()
        with pytest.raises(UpstreamFailed, match=r"\.2\.2 \(cancelled\)"):
            flow.result(timeout=10)
        status = flow.status()
        assert [s.state for s in status.steps] == ["completed", "completed", "cancelled",
                                                   "cancelled"]
        # Cancelled by hand, not skipped: only the step after it names it as upstream.
        assert [status.skipped(s) for s in status.steps] == [False, False, False, True]
        assert status.steps[3].upstream == f"{flow.flow_id}.2.2"


class TestLog:
    def test_every_step_event_forms_a_legal_path_and_no_stage_starts_early(
        self, tasks: Tasks, app: App, client: redis.Redis, start_worker: StartWorker
    ) -> None:
        add, boom, total = tasks["add"], tasks["boom"], tasks["total"]
        start_worker(concurrency=3)
        flows = [chain(add.s(1), add.s(), add.s()).enqueue(),
                 group(add.s(n) for n in range(5)).then(total.s()).enqueue(),
                 chain(boom.s(1), add.s()).enqueue()]
        for flow in flows:
            wait_until(lambda f=flow: f.status().ended)  # type: ignore[misc]
        log = read_log(client, app.broker.keys.events)
        report = validate(log)
        assert report.ok, report.violations
        assert sum(f["type"] == "triggered" for _, f in log) == 2 + 1
        forged = [(1, {"type": "enqueued", "task": "f.1.1", "state": "pending", "flow": "f"}),
                  (2, {"type": "enqueued", "task": "f.2.1", "state": "waiting", "flow": "f"}),
                  (3, {"type": "triggered", "task": "f.2.1", "state": "pending", "flow": "f"})]
        assert validate(forged, require_terminal=False).violations == [
            ("f.2.1", 3, "triggered before every step of stage 1 ended")]


class TestRefused:
    def test_bad_steps_and_groups_are_refused_before_anything_is_sent(
        self, tasks: Tasks, app: App, client: redis.Redis
    ) -> None:
        add, total = tasks["add"], tasks["total"]
        with pytest.raises(InvalidTaskError, match="takes no delay"):
            add.s(1, delay=5)
        with pytest.raises(InvalidTaskError, match=r"stage 2.*first argument is what"):
            chain(add.s(1), total.s(2, 3)).enqueue()
        with pytest.raises(InvalidTaskError, match="a chain inside a group"):
            group(add.s(1), chain(add.s(2)))  # type: ignore[arg-type]
        with pytest.raises(InvalidTaskError, match="on_member_failure must be"):
            group(add.s(1), on_member_failure="ignore")
        with pytest.raises(InvalidTaskError, match="invalid workflow id"):
            chain(add.s(1)).enqueue(flow_id="has.dot")
        with pytest.raises(InvalidTaskError, match="at least one step"):
            group([])
        for alone in (5, None, "ab"):
            with pytest.raises(InvalidTaskError, match="or one iterable of them, not"):
                group(alone)  # type: ignore[arg-type]
        for nested in (chain(add.s(2), add.s()), group(add.s(2))):
            with pytest.raises(InvalidTaskError, match=r"inside a group|members are steps"):
                group(nested)  # type: ignore[arg-type]
        for calls in (5, None):
            with pytest.raises(InvalidTaskError, match="calls must be an iterable"):
                add.enqueue_many(calls)  # type: ignore[arg-type]
        other = App(queue="other", settings=app.settings)
        stranger = other.task("stranger")(lambda x: x)
        with pytest.raises(InvalidTaskError, match="same App"):
            chain(add.s(1), stranger.s()).enqueue()
        quiet = app.task("quiet", store_result=False)(lambda x: x)
        for keeps_nothing in (chain(quiet.s(1), add.s()), chain(group(quiet.s(1)), total.s())):
            with pytest.raises(InvalidTaskError, match="keeps no result"):
                keeps_nothing.enqueue()
        assert client.keys(app.broker.keys.prefix + "*") == []
        assert chain(add.s(1), quiet.s()).enqueue().created  # last: its None is no one's input

    def test_a_sharded_app_refuses_workflows(self, settings: Settings) -> None:
        sharded = App(queue="sharded", settings=settings, shards=2)
        step = sharded.task("one")(lambda: 1)
        with pytest.raises(ConfigError, match="2 shards: a workflow runs in one queue"):
            chain(step.s()).enqueue()


@pytest.mark.processes
def test_a_killed_worker_holding_steps_loses_no_workflow_and_charges_nothing_twice(
    settings: Settings, app: App, client: redis.Redis, ledger_path: Path,
    workers: WorkerProcesses,
) -> None:
    """Real `taskq worker` processes run the chaos run's chains of 5 and chords of 20;
    one is SIGKILLed while it holds steps. Every workflow completes with its value, each
    later stage is triggered once, and each step's charge is applied once."""
    flow_tasks(app, Simulation(ledger_path=str(ledger_path)))
    worker_app = ("--app", "taskq.tools.chaos.worker_app:drain_app")
    killed = workers.start(*worker_app, "-c", "4", WORK_SECONDS="30")
    ids = ["chord-00000", "chain-00001", "chord-00002", "chain-00003"]
    flows = [build(app, flow_id, max_retries=5).enqueue(flow_id=flow_id) for flow_id in ids]
    wait_until(lambda: app.broker.counts().leased >= 2, 20, "the doomed worker to hold steps")
    killed.send_signal(signal.SIGKILL)
    killed.wait(5)
    workers.start(*worker_app, "-c", "4", WORK_SECONDS="0.01")
    for flow_id, flow in zip(ids, flows, strict=True):
        assert flow.result(timeout=60) == expected(flow_id)[1]
    log = read_log(client, app.broker.keys.events)
    report = validate(log)
    assert report.ok, report.violations[:3]
    triggered = Counter(f["flow"] for _, f in log if f["type"] == "triggered")
    assert triggered == {flow_id: triggers_expected(flow_id) for flow_id in ids}
    assert any(f["type"] == "reaped" for _, f in log)
    steps = [s.task_id for flow in flows for s in flow.status().steps]
    assert Ledger(ledger_path).charges_by_task("") == dict.fromkeys(steps, 1)


class TestRepr:
    def test_the_repr_of_a_step_cuts_a_long_argument_and_names_its_task(self) -> None:
        app = App(queue="shop", settings=Settings(redis_url="redis://nowhere.invalid:6379/0"))

        @app.task("shop.echo")
        def echo(text: str) -> str:
            return text

        step = echo.s("x" * 100_000)
        assert len(repr(step)) < 1_000 and "<Task shop.echo>" in repr(step)


USER_FLOWS = """
from typing import Any

import taskq

app = taskq.App(queue="q")


@app.task("fetch")
def fetch(url: str) -> str:
    return url


@app.task("size")
async def size(text: str) -> int:
    return len(text)


@app.task("total")
def total(sizes: list[int]) -> float:
    return float(sum(sizes))


one: int = taskq.chain(fetch.s("u"), size.s()).enqueue().result()
chord: float = taskq.group(size.s("a"), size.s("b")).then(total.s()).enqueue().result()
members: list[Any] = taskq.group(size.s("a")).enqueue().result()
alone: str = fetch.s("u").enqueue().result()
then: int = fetch.s("u").then(size.s()).enqueue().result()
later: taskq.WorkflowHandle = app.workflow("f")
anything: bytes = later.result()
built: taskq.Chain = taskq.Chain(fetch.s("u"), size.s())
step: taskq.Step = fetch.s("u")
optioned: int = taskq.chain(fetch.s("u"), size.options(priority=7).s()).enqueue().result()
long: float = fetch.s("u").then(size.s(), size.s(), size.s(), total.s()).enqueue().result()


async def waited() -> int:
    handle = await taskq.chain(fetch.s("u"), size.s()).enqueue_async()
    return await handle.result_async()

wrong: str = taskq.chain(fetch.s("u"), size.s()).enqueue().result()
"""


def test_a_workflows_result_has_the_type_its_last_stage_hands_on_under_mypy_strict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chain's is its last step's return (awaited for `async def`), a group's a list;
    a handle made from an id says nothing of its type."""
    errors, out, _ = strict_mypy_errors("flows_user.py", USER_FLOWS, tmp_path, monkeypatch)
    assert errors == ['Incompatible types in assignment (expression has type "int", '
                      'variable has type "str")  [assignment]'], out
