"""One task as people look at it: its events found by a bounded scan of the log, and its
record with the result and failure decoded."""

from __future__ import annotations

import json

import pytest
import redis

from taskq.broker import Broker, NewTask
from taskq.errors import InvalidTaskError
from taskq.history import CHUNK, TaskEvent, read_task, task_events
from taskq.results import Failure

TRACEBACK = 'Traceback (most recent call last):\n  File "jobs.py", line 3\nValueError: bad\n'


def complete(broker: Broker, task_id: str, result: object) -> int:
    """Lease the next task (it must be `task_id`) and ack it with `result`; its token."""
    leased = broker.lease("w-1", 30)
    assert leased is not None and leased[0] == task_id
    assert broker.ack(task_id, leased[1], json.dumps(result))
    return leased[1]


def kill(broker: Broker, task_id: str) -> None:
    broker.enqueue(task_id, max_retries=0, name="jobs.parse")
    leased = broker.lease("w-1", 30)
    assert leased is not None and leased[0] == task_id
    failure = Failure("builtins.ValueError", "bad", TRACEBACK)
    assert broker.fail(task_id, leased[1], failure).status == "dead"


class TestTaskEvents:
    def test_a_tasks_events_come_oldest_first_without_other_tasks_events(
        self, broker: Broker
    ) -> None:
        broker.enqueue("other-1")
        broker.enqueue("mine", name="jobs.add")
        broker.enqueue("other-2")
        broker.lease("w-1", 30)  # other-1
        broker.lease("w-1", 30)  # mine
        token = broker.task("mine")
        assert token is not None
        assert broker.ack("mine", token.fencing_token, "3")

        found = task_events(broker, "mine")
        assert [(e.seq, e.type, e.state) for e in found.events] == [
            (2, "enqueued", "pending"), (5, "leased", "running"), (6, "completed", "completed")]
        assert found.events[0].fields["name"] == "jobs.add"
        assert found.events[2].fields["result"] == "3"
        assert all(e.ts > 0 for e in found.events)
        assert (found.end, found.complete) == ("enqueued", True)

    def test_the_scan_stops_at_the_tasks_enqueued_event(self, broker: Broker) -> None:
        broker.enqueue_many([NewTask(f"before-{i}") for i in range(50)])
        broker.enqueue("mine")
        found = task_events(broker, "mine")
        assert [e.type for e in found.events] == ["enqueued"]
        assert found.read == 1

    def test_events_are_found_across_chunks_of_the_log(self, broker: Broker) -> None:
        broker.enqueue("mine")
        broker.enqueue_many([NewTask(f"noise-{i}") for i in range(CHUNK * 2 + 7)])
        assert broker.lease("w-1", 30) is not None  # the oldest ready task: mine
        found = task_events(broker, "mine")
        assert [e.type for e in found.events] == ["enqueued", "leased"]
        assert found.read == CHUNK * 2 + 9

    def test_a_scan_that_hits_its_bound_says_older_events_may_remain(
        self, broker: Broker
    ) -> None:
        broker.enqueue("mine")
        broker.enqueue_many([NewTask(f"noise-{i}") for i in range(30)])
        broker.lease("w-1", 30)
        found = task_events(broker, "mine", scan=20)
        assert [e.type for e in found.events] == ["leased"]
        assert (found.read, found.end, found.complete) == (20, "limit", False)
        whole = task_events(broker, "mine", scan=32)
        assert [e.type for e in whole.events] == ["enqueued", "leased"]
        assert (whole.read, whole.end) == (32, "enqueued")

    def test_a_trimmed_log_ends_the_scan_at_its_start(self, client: redis.Redis) -> None:
        short = Broker(client, "short", events_retention=5)
        short.enqueue("mine")
        short.enqueue_many([NewTask(f"noise-{i}") for i in range(10)])
        short.lease("w-1", 30)  # mine: its enqueued event is trimmed away
        found = task_events(short, "mine")
        assert [e.type for e in found.events] == ["leased"]
        assert (found.end, found.complete) == ("log_start", True)

    def test_an_earlier_task_of_the_same_id_is_left_out(self, broker: Broker) -> None:
        broker.enqueue("reused")
        complete(broker, "reused", "first")
        broker.client.delete(broker.keys.task("reused"))  # as when its record expires
        broker.enqueue("reused")
        assert [e.type for e in task_events(broker, "reused").events] == ["enqueued"]

    def test_an_empty_log_has_no_events(self, broker: Broker) -> None:
        found = task_events(broker, "nothing")
        assert (found.events, found.read, found.end) == ([], 0, "log_start")

    def test_a_scan_of_nothing_reads_nothing(self, broker: Broker) -> None:
        broker.enqueue("mine")
        found = task_events(broker, "mine", scan=0)
        assert (found.events, found.read, found.end, found.complete) == ([], 0, "limit", False)

    @pytest.mark.parametrize("scan", [-1, 1_000_001, 1.5, True])
    def test_a_scan_bound_out_of_range_is_refused(self, broker: Broker, scan: object) -> None:
        with pytest.raises(InvalidTaskError, match="scan must be a whole number"):
            task_events(broker, "x", scan=scan)  # type: ignore[arg-type]

    def test_an_invalid_task_id_is_refused(self, broker: Broker) -> None:
        with pytest.raises(InvalidTaskError, match="invalid task id"):
            task_events(broker, "no spaces")


class TestReadTask:
    def test_a_completed_task_has_its_result_decoded(self, broker: Broker) -> None:
        broker.enqueue("sum", name="jobs.add")
        token = complete(broker, "sum", {"total": 3, "parts": [1, 2], "who": "zoë"})
        view = read_task(broker, "sum")
        assert view is not None
        assert view.result() == {"total": 3, "parts": [1, 2], "who": "zoë"}
        assert view.failure is None and view.attempts == 1
        body = view.to_json()
        assert body["result"] == {"total": 3, "parts": [1, 2], "who": "zoë"}
        assert body["result_bytes"] == len(json.dumps(body["result"]).encode())
        assert (body["error"], body["result_error"]) == (None, None)
        assert [e["type"] for e in body["events"]] == ["enqueued", "leased", "completed"]
        assert body["events"][1]["token"] == token and body["events"][1]["worker"] == "w-1"
        assert body["events_scan"] == {"read": 3, "end": "enqueued", "complete": True}
        assert (body["state"], body["name"], body["attempts"]) == ("completed", "jobs.add", 1)
        assert json.loads(json.dumps(body)) == body

    def test_the_priority_is_a_number_in_the_record_and_on_its_enqueued_event(
        self, broker: Broker
    ) -> None:
        broker.enqueue_many([NewTask("urgent", priority=9), NewTask("plain")])
        urgent, plain = read_task(broker, "urgent"), read_task(broker, "plain")
        assert urgent is not None and plain is not None
        assert urgent.to_json()["priority"] == 9 and urgent.to_json()["events"][0]["priority"] == 9
        assert plain.to_json()["priority"] == 5 and "priority" not in plain.to_json()["events"][0]

    def test_a_null_result_is_told_apart_from_no_result(self, broker: Broker) -> None:
        broker.enqueue("none-kept")
        leased = broker.lease("w-1", 30)
        assert leased is not None
        broker.ack("none-kept", leased[1])
        broker.enqueue("null")
        complete(broker, "null", None)
        kept, nothing = read_task(broker, "null"), read_task(broker, "none-kept")
        assert kept is not None and nothing is not None
        assert (kept.to_json()["result"], kept.to_json()["result_bytes"]) == (None, 4)
        assert (nothing.to_json()["result"], nothing.to_json()["result_bytes"]) == (None, None)

    def test_a_dead_task_has_its_error_and_traceback(self, broker: Broker) -> None:
        kill(broker, "doomed")
        view = read_task(broker, "doomed")
        assert view is not None
        body = view.to_json()
        assert body["error"] == {"type": "builtins.ValueError", "message": "bad",
                                 "traceback": TRACEBACK}
        assert (body["state"], body["attempts"], body["result_bytes"]) == ("dead", 1, None)
        assert body["events"][-1]["type"] == "failed"
        assert body["events"][-1]["error_type"] == "builtins.ValueError"

    def test_a_retried_failure_shows_its_summary(self, broker: Broker) -> None:
        broker.enqueue("flaky", max_retries=2)
        leased = broker.lease("w-1", 30)
        assert leased is not None
        broker.fail("flaky", leased[1], "OSError: disk full")
        view = read_task(broker, "flaky")
        assert view is not None
        assert view.to_json()["error"] == {"type": "", "message": "OSError: disk full",
                                           "traceback": ""}
        assert (view.record.state, view.attempts) == ("delayed", 1)

    @pytest.mark.parametrize("text", ["not json", "NaN", "[1, -Infinity]", "[" * 100_000])
    def test_a_result_that_is_not_json_is_shown_as_its_text(
        self, broker: Broker, text: str
    ) -> None:
        broker.enqueue("odd")
        leased = broker.lease("w-1", 30)
        assert leased is not None
        assert broker.ack("odd", leased[1], "1")
        # Written by hand, or by a taskq that took any text: the broker now refuses it.
        broker.client.hset(broker.keys.task("odd"), "result", text)
        view = read_task(broker, "odd")
        assert view is not None
        body = view.to_json()
        assert body["result"] == text
        assert "stored result is not valid JSON" in body["result_error"]
        json.dumps(body, allow_nan=False)

    def test_a_task_with_no_record_has_no_view(self, broker: Broker) -> None:
        broker.enqueue("other")
        assert read_task(broker, "missing") is None


class TestHandWrittenNumbers:
    def test_a_count_in_digits_that_are_not_ascii_is_kept_as_text_not_a_crash(self) -> None:
        event = TaskEvent.from_entry("7-0", {"type": "leased", "state": "running",
                                             "ts": "²", "retries": "²", "token": "3"})
        assert event.ts == 0
        assert event.to_json() | {"retries": "²", "token": 3} == event.to_json()

    def test_a_lease_of_a_record_whose_retries_are_not_digits_writes_a_number(
        self, broker: Broker
    ) -> None:
        broker.enqueue("odd")
        broker.client.hset(broker.keys.task("odd"), "retries", "²")
        assert broker.lease("w-1", 30) is not None
        view = read_task(broker, "odd")
        assert view is not None
        leased = [e for e in view.events.events if e.type == "leased"]
        assert [e.to_json()["retries"] for e in leased] == [0]


class TestAttempts:
    def test_a_task_cancelled_as_it_ran_or_out_of_the_dlq_counts_its_last_attempt(
        self, broker: Broker
    ) -> None:
        broker.enqueue("ran", max_retries=0)
        task_id, token = broker.lease("w-1", 30) or ("", 0)
        assert broker.cancel("ran").outcome == "requested"
        assert broker.ack_cancelled(task_id, token)
        broker.enqueue("died", max_retries=0)
        task_id, token = broker.lease("w-1", 30) or ("", 0)
        assert broker.fail(task_id, token, "boom").status == "dead"
        assert broker.cancel("died").outcome == "cancelled"
        attempts = {t: view.attempts for t in ("ran", "died")
                    if (view := read_task(broker, t)) is not None}
        assert attempts == {"ran": 1, "died": 1}

    def test_a_task_revived_from_the_dlq_and_cancelled_before_it_ran_counts_none(
        self, broker: Broker
    ) -> None:
        broker.enqueue("revived", max_retries=0)
        task_id, token = broker.lease("w-1", 30) or ("", 0)
        assert broker.fail(task_id, token, "boom").status == "dead"
        assert broker.retry_dead("revived")
        assert broker.cancel("revived").outcome == "cancelled"
        view = read_task(broker, "revived")
        assert view is not None and (view.record.state, view.attempts) == ("cancelled", 0)
