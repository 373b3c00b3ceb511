"""A running task's progress on the real broker: recorded with an event for the current
run only, shown by the snapshot only while that run holds the lease, refused when out
of range; and `current_task().progress` from a handler on a real worker, rate-limited,
holding a fraction a little off to 0..1 and never failing its task."""

from __future__ import annotations

import time

import pytest

from helpers import assert_refused_unchanged, events, lease_one, leased, overwrite, wait_past
from taskq import App, current_task
from taskq.broker import Broker
from taskq.context import TaskContext
from taskq.errors import InvalidTaskError
from taskq.snapshot import take_snapshot
from taskq.worker.heartbeat import LeaseCheck
from waiting import wait_for_state, wait_until
from worker_support import StartWorker


def shown(broker: Broker, task_id: str) -> tuple[float | None, str]:
    (lease,) = [v for v in take_snapshot(broker).leased if v.task_id == task_id]
    return lease.progress, lease.progress_message


class TestTheScript:
    def test_the_current_run_records_it_with_an_event(self, broker: Broker) -> None:
        token = leased(broker)
        assert shown(broker, "t1") == (None, "")
        assert broker.progress("t1", token, 0.4, "4 of 10 rows")
        assert shown(broker, "t1") == (0.4, "4 of 10 rows")
        (event,) = [e for e in events(broker.client, broker.keys) if e.type == "progress"]
        assert (event.task, event.fields["token"], event.fields["progress"],
                event.fields["message"]) == ("t1", str(token), "400", "4 of 10 rows")

    def test_a_stale_run_changes_nothing_and_the_next_run_starts_with_none(
        self, broker: Broker
    ) -> None:
        broker.enqueue("t1")
        _, first = lease_one(broker, seconds=0.05)
        assert broker.progress("t1", first, 0.9, "nearly")
        wait_past(0.06)
        broker.reap(backoff_base=0.001, backoff_max=0.001)
        wait_past(0.01)
        broker.promote()
        _, second = lease_one(broker)
        assert shown(broker, "t1") == (None, "")  # the first run's word is not the second's
        before = len(events(broker.client, broker.keys))
        assert not broker.progress("t1", first, 1.0, "done, says the lost run")
        assert len(events(broker.client, broker.keys)) == before
        assert shown(broker, "t1") == (None, "")
        assert broker.progress("t1", second, 0.1)
        assert shown(broker, "t1") == (0.1, "")

    def test_an_ended_task_takes_no_progress(self, broker: Broker) -> None:
        token = leased(broker)
        assert broker.ack("t1", token)
        assert not broker.progress("t1", token, 0.5)
        assert not any(e.type == "progress" for e in events(broker.client, broker.keys))

    @pytest.mark.parametrize(("fraction", "message", "says"), [
        (-0.1, "", "progress must be"), (1.5, "", "progress must be"),
        (float("nan"), "", "progress must be"), (0.5, "x" * 201, "message must be"),
        (0.5, "\ud800", "UTF-8"),
    ])
    def test_a_value_out_of_range_is_refused_before_any_write(
        self, broker: Broker, fraction: float, message: str, says: str
    ) -> None:
        token = leased(broker)
        with pytest.raises(InvalidTaskError, match=says):
            broker.progress("t1", token, fraction, message)
        assert shown(broker, "t1") == (None, "")

    def test_an_events_key_of_another_type_refuses_it_before_any_write(
        self, broker: Broker
    ) -> None:
        token = leased(broker)
        key = overwrite(broker.client, broker.keys, "events")
        assert_refused_unchanged(broker.client, key,
                                 lambda: broker.progress("t1", token, 0.5, "half"))


class TestFromAHandler:
    def test_a_handler_reports_and_the_snapshot_follows_at_most_four_a_second(
        self, app: App, start_worker: StartWorker
    ) -> None:
        said: list[bool] = []

        @app.task("shop.import")
        def import_rows() -> None:
            task = current_task()
            said.append(task.progress(0.2, "reading"))
            said.append(task.progress(0.3, "too soon: dropped"))
            time.sleep(0.3)
            said.append(task.progress(0.6, "writing"))
            time.sleep(0.6)
            said.append(task.progress(1.0, "done"))
            said.append(task.progress(1.0, "done, again at once"))  # 1 is never dropped

        start_worker()
        handle = import_rows.enqueue()
        wait_until(lambda: any(v.progress == 0.6 for v in take_snapshot(app.broker).leased))
        assert shown(app.broker, handle.task_id) == (0.6, "writing")
        wait_for_state(app.broker, handle.task_id, "completed")
        assert said == [True, False, True, True, True]
        reported = [e.fields["progress"] for e in events(app.broker.client, app.broker.keys)
                    if e.type == "progress"]
        assert reported == ["200", "600", "1000", "1000"]

    def test_outside_a_worker_it_records_nothing(self, app: App) -> None:
        from taskq.context import TaskContext  # noqa: PLC0415

        context = TaskContext("t1", "shop.x", app.queue, "w", 1, 1, 3)
        assert context.progress(0.5) is False


class TestFromAHandlersContext:
    """The handler's own call holds what it can and records nothing it cannot: a bad
    value there must not fail a task whose work is done."""

    @staticmethod
    def context(broker: Broker) -> TaskContext:
        return TaskContext("t1", "n", broker.queue, "w1", leased(broker), 1, 3,
                           lease=LeaseCheck(broker, 30.0))

    @pytest.mark.parametrize(("fraction", "kept"), [
        (1.1, 1.0), (-0.5, 0.0), (10**400, 1.0), (1, 1.0),
    ])  # fmt: skip
    def test_a_fraction_past_its_bounds_is_held_to_them_and_a_message_cut(
        self, broker: Broker, fraction: float, kept: float
    ) -> None:
        context = self.context(broker)
        assert context.progress(fraction, "x" * 500)
        assert shown(broker, "t1") == (kept, "x" * 200)

    def test_a_lone_surrogate_in_its_message_is_replaced(self, broker: Broker) -> None:
        context = self.context(broker)
        assert context.progress(0.5, "row \ud800")
        assert shown(broker, "t1") == (0.5, "row ?")

    @pytest.mark.parametrize(("fraction", "message"), [
        (float("nan"), ""), (float("inf"), ""), (True, ""), ("0.5", ""), (None, ""),
        (0.5, b"bytes"),
    ])  # fmt: skip
    def test_what_it_cannot_hold_is_not_recorded_and_said_once(
        self, broker: Broker, caplog: pytest.LogCaptureFixture, fraction: object,
        message: object
    ) -> None:
        context = self.context(broker)
        assert context.progress(fraction, message) is False  # type: ignore[arg-type]
        assert context.progress(fraction, message) is False  # type: ignore[arg-type]
        assert shown(broker, "t1") == (None, "")
        said = [r.getMessage() for r in caplog.records if "not recorded" in r.getMessage()]
        assert len(said) == 1 and "must be" in said[0], said
        assert context.progress(0.25)  # a good one after it is recorded
