"""The loop thread's inbox: outcomes put (each waking the loop) and held (waking it once
since its last look, when asked), taken once each, even with threads contending."""

from __future__ import annotations

import threading
import time

from taskq.context import TaskContext
from taskq.results import LeasedTask
from taskq.worker.inbox import Inbox, Outcome


def outcome(n: int) -> Outcome:
    task = LeasedTask(f"t{n}", n + 1, "noop", "{}", 0, 0)
    context = TaskContext(task_id=task.task_id, name="noop", queue="q", worker_id="w",
                          token=task.token, attempt=1, max_retries=0)
    return Outcome(task, context, None)


def waits_past(inbox: Inbox, seconds: float) -> bool:
    """Whether `inbox.wait` blocks its full `seconds`: no message was waiting."""
    began = time.monotonic()
    inbox.wait(seconds)
    return time.monotonic() - began >= seconds


class TestInbox:
    def test_a_put_outcome_wakes_the_loop_and_is_taken(self) -> None:
        inbox = Inbox()
        inbox.put(outcome(1))
        assert not waits_past(inbox, 5)
        assert [o.task.task_id for o in inbox.take()] == ["t1"]

    def test_a_held_outcome_is_taken_without_waking_the_loop(self) -> None:
        inbox = Inbox()
        inbox.hold(outcome(1), wake=False)
        assert waits_past(inbox, 0.2)
        assert [o.task.task_id for o in inbox.take()] == ["t1"]
        assert inbox.take() == []

    def test_only_the_first_waking_hold_since_a_take_wakes_the_loop(self) -> None:
        inbox = Inbox()
        for n in range(3):
            inbox.hold(outcome(n), wake=True)
        assert not waits_past(inbox, 5)
        assert waits_past(inbox, 0.2), "a second wake-up was left for the loop"
        assert [o.task.task_id for o in inbox.take()] == ["t0", "t1", "t2"]
        inbox.hold(outcome(3), wake=True)  # the take re-arms the wake-up
        assert not waits_past(inbox, 5)

    def test_outcomes_from_contending_threads_are_each_taken_once(self) -> None:
        inbox = Inbox()
        threads, each = 8, 2000
        done = threading.Event()

        def handler(k: int) -> None:
            for n in range(k * each, (k + 1) * each):
                if n % 3 == 0:
                    inbox.put(outcome(n))
                else:
                    inbox.hold(outcome(n), wake=n % 3 == 1)

        running = [threading.Thread(target=handler, args=(k,)) for k in range(threads)]
        for thread in running:
            thread.start()
        threading.Thread(target=lambda: ([t.join() for t in running], done.set())).start()
        taken: list[str] = []
        while not done.is_set():
            inbox.wait(0.01)
            taken += [o.task.task_id for o in inbox.take()]
        taken += [o.task.task_id for o in inbox.take()]
        assert sorted(taken) == sorted(f"t{n}" for n in range(threads * each))
