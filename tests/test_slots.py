"""Slots: the one owner of what a worker's threads share, behind one lock."""

from __future__ import annotations

import threading
import time

from taskq.context import TaskContext
from taskq.worker.slots import Slots


def context(task_id: str, token: int = 1, queue: str = "q") -> TaskContext:
    return TaskContext(task_id=task_id, name="n", queue=queue, worker_id="w", token=token,
                       attempt=1, max_retries=3)


class TestReserve:
    def test_a_reservation_takes_every_free_slot_and_the_next_gets_none(self) -> None:
        slots = Slots(4)
        slots.hold(context("a"))
        assert slots.reserve() == 3
        assert slots.reserve() == 0
        slots.unreserve(3)
        assert slots.reserve() == 3

    def test_the_slots_of_finishing_handlers_count_as_free(self) -> None:
        slots = Slots(2)
        slots.hold(context("a"))
        slots.hold(context("b"))
        assert slots.reserve(finishing=1) == 1

    def test_threads_reserving_at_once_never_reserve_more_than_fit(self) -> None:
        slots = Slots(8)
        reserved: list[int] = []
        count = threading.Lock()
        # Each round every thread reserves and keeps what it got until all have tried,
        # then gives it back: what is kept at once is what was reserved at once.
        all_reserved = threading.Barrier(16)
        all_given_back = threading.Barrier(16)

        def reserve() -> None:
            for _ in range(50):
                all_given_back.wait()
                got = slots.reserve()
                all_reserved.wait()
                with count:
                    reserved.append(got)
                all_given_back.wait()
                slots.unreserve(got)

        threads = [threading.Thread(target=reserve) for _ in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        rounds = [sum(reserved[i:i + 16]) for i in range(0, len(reserved), 16)]
        assert len(rounds) == 50 and all(taken == 8 for taken in rounds), rounds
        assert slots.reserve() == 8


class TestInHand:
    def test_the_same_task_under_two_tokens_is_two_runs_in_hand(self) -> None:
        slots = Slots(2)
        stale, current = context("a", 1), context("a", 3)
        slots.hold(stale)
        slots.hold(current)
        slots.let_go(context("a"))
        assert slots.in_hand() == [current]

    def test_the_same_task_id_from_two_queues_is_two_runs_in_hand(self) -> None:
        slots = Slots(2)
        high, low = context("a", queue="high"), context("a", queue="low")
        slots.hold(high, low)
        slots.let_go(context("a", queue="high"))
        assert slots.in_hand() == [low]

    def test_idle_means_nothing_in_hand_and_no_lease_under_way(self) -> None:
        slots = Slots(2)
        assert slots.idle()
        free = slots.reserve()
        assert not slots.idle()
        slots.unreserve(free)
        slots.hold(context("a"))
        assert not slots.idle()
        slots.let_go(context("a"))
        assert slots.idle()


class TestCounters:
    def test_holding_counts_a_lease_and_counters_add_up(self) -> None:
        slots = Slots(1)
        slots.hold(context("a"))
        slots.count("acked")
        slots.count("stale", 2)
        stats = slots.stats()
        assert (stats.leased, stats.acked, stats.stale, stats.retried) == (1, 1, 2, 0)

    def test_stats_are_a_copy_that_later_counts_do_not_change(self) -> None:
        slots = Slots(1)
        before = slots.stats()
        slots.count("dead")
        assert before.dead == 0 and slots.stats().dead == 1

    def test_counts_from_many_threads_are_none_of_them_lost(self) -> None:
        slots = Slots(1)

        def count() -> None:
            for _ in range(1000):
                slots.count("acked")

        threads = [threading.Thread(target=count) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert slots.stats().acked == 8000



class TestClose:
    def test_waits_for_a_lease_under_way_whose_tasks_it_then_refuses(self) -> None:
        slots = Slots(4)
        slots.hold(context("a"))
        free = slots.reserve()
        taken: list[bool] = []

        def lease_lands() -> None:
            taken.append(slots.hold(context("b")))
            slots.unreserve(free)

        threading.Timer(0.1, lease_lands).start()
        began = time.monotonic()
        slots.close(5)
        assert time.monotonic() - began >= 0.09
        assert taken == [False] and [c.task_id for c in slots.in_hand()] == ["a"]

    def test_once_closed_nothing_is_reserved_or_held(self) -> None:
        slots = Slots(4)
        slots.close(0)
        assert slots.reserve() == 0
        assert slots.hold(context("late")) is False
        assert slots.in_hand() == [] and slots.idle()

    def test_gives_up_waiting_after_its_timeout(self) -> None:
        slots = Slots(2)
        slots.reserve()
        began = time.monotonic()
        slots.close(0.05)
        assert time.monotonic() - began < 1 and slots.in_hand() == []
