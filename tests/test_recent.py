"""Recently ended tasks, from the event log: newest first, each task once at its latest
end, only while its record is kept in that state, searchable by id prefix and name;
through the script, `taskq history` and GET /api/history."""

from __future__ import annotations

import httpx
import pytest
import redis

from cli_support import CONFIG_VARIABLES
from serve_support import Server
from taskq.broker import Broker
from taskq.cli import main
from taskq.errors import InvalidTaskError
from taskq.recent import recent
from taskq.settings import Settings


def end(broker: Broker, task_id: str, how: str, name: str = "shop.charge") -> None:
    """Enqueue `task_id` and end it `how`: completed, dead or cancelled."""
    broker.enqueue(task_id, name=name, max_retries=0)
    if how == "cancelled":
        assert broker.cancel(task_id).outcome == "cancelled"
        return
    (task,) = broker.lease_many("w", 30, 1).tasks
    if how == "completed":
        assert broker.ack(task_id, task.token)
    else:
        assert broker.fail(task_id, task.token, "ValueError: no stock").status == "dead"


@pytest.fixture
def ended(queue: Broker) -> Broker:
    end(queue, "ord-1", "completed")
    end(queue, "ord-2", "dead")
    end(queue, "inv-3", "completed", name="shop.invoice")
    end(queue, "ord-4", "cancelled")
    queue.enqueue("ord-5", name="shop.charge")  # still pending: not listed
    return queue


class TestTheScript:
    def test_lists_every_end_newest_first_with_its_facts(self, ended: Broker) -> None:
        found = recent(ended)
        assert [(t.task_id, t.state) for t in found.tasks] == [
            ("ord-4", "cancelled"), ("inv-3", "completed"), ("ord-2", "dead"),
            ("ord-1", "completed")]
        dead = found.tasks[2]
        assert (dead.name, dead.retries, dead.last_error) == ("shop.charge", 0,
                                                              "ValueError: no stock")
        assert all(t.ended_at > 0 for t in found.tasks)
        assert found.complete and found.scanned == len(ended.client.xrange(ended.keys.events))

    def test_searches_by_state_id_prefix_and_name(self, ended: Broker) -> None:
        assert [t.task_id for t in recent(ended, states=["dead"]).tasks] == ["ord-2"]
        assert [t.task_id for t in recent(ended, id_prefix="ord-").tasks] == [
            "ord-4", "ord-2", "ord-1"]
        assert [t.task_id for t in recent(ended, name="invoice").tasks] == ["inv-3"]
        assert [t.task_id for t in recent(ended, states=["completed"], name="charge",
                                          limit=1).tasks] == ["ord-1"]

    def test_a_revived_task_is_listed_once_at_its_latest_end_and_not_while_it_waits(
        self, queue: Broker
    ) -> None:
        end(queue, "again", "dead")
        assert queue.retry_dead("again")
        assert recent(queue).tasks == []  # pending again: not ended
        (task,) = queue.lease_many("w", 30, 1).tasks
        assert queue.ack("again", task.token)
        assert [(t.task_id, t.state) for t in recent(queue).tasks] == [("again", "completed")]

    def test_an_expired_record_is_not_listed_and_the_scan_is_bounded(
        self, queue: Broker
    ) -> None:
        for n in range(30):
            end(queue, f"t{n}", "completed")
        queue.client.delete(queue.keys.task("t29"))
        found = recent(queue, scan=10)
        assert [t.task_id for t in found.tasks][:2] == ["t28", "t27"]
        assert (found.scanned, found.complete) == (10, False)
        assert len(found.tasks) == 3  # each task: enqueued, leased, completed

    def test_a_search_reads_the_log_a_stretch_a_call_and_lists_a_task_once(
        self, queue: Broker, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr("taskq.recent.STRETCH", 4)
        end(queue, "again", "dead")
        for n in range(5):
            end(queue, f"t{n}", "completed")
        assert queue.retry_dead("again")
        (task,) = queue.lease_many("w", 30, 1).tasks
        assert queue.fail("again", task.token, "ValueError: still no stock").status == "dead"
        found = recent(queue, states=["dead"])
        assert [t.task_id for t in found.tasks] == ["again"]
        assert found.tasks[0].ended_at == max(
            int(fields["ts"]) for _, fields in queue.client.xrange(queue.keys.events)
            if fields.get("state") == "dead")
        assert found.complete and found.scanned == len(queue.client.xrange(queue.keys.events))

    def test_no_call_reads_more_than_a_stretch_of_the_log(self, queue: Broker) -> None:
        with pytest.raises(redis.ResponseError, match="scan"):
            queue.scripts.recent(keys=[queue.keys.events],
                                 args=[queue.keys.prefix, "dead", "", "", 10, 1001, "+"])

    @pytest.mark.parametrize(("options", "says"), [
        ({"states": ["running"]}, "states must be"), ({"limit": 0}, "limit"),
        ({"scan": 10**6}, "scan"), ({"name": "x" * 201}, "at most 200"),
        ({"name": "\ud800"}, "text \\(UTF-8\\)"), ({"id_prefix": "\udcff"}, "id prefix"),
    ])
    def test_a_search_taskq_cannot_run_is_refused(
        self, queue: Broker, options: dict[str, object], says: str
    ) -> None:
        with pytest.raises(InvalidTaskError, match=says):
            recent(queue, **options)  # type: ignore[arg-type]


def test_taskq_history_prints_them_and_searches(
    ended: Broker, settings: Settings, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for variable in CONFIG_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("REDIS_URL", settings.redis_url)
    assert main(["history", "--queue", ended.queue]) == 0
    out = capsys.readouterr().out
    assert f"4 ended task(s) on queue {ended.queue!r}, newest first (the whole log):" in out
    assert "dead       ord-2  shop.charge  retries 0  ValueError: no stock" in out
    assert main(["history", "--queue", ended.queue, "--state", "completed", "--id", "inv"]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("  ")]
    assert len(lines) == 1 and "inv-3  shop.invoice" in lines[0]
    assert main(["history", "--queue", ended.queue, "--name", "nothing-like-it"]) == 0
    assert "no ended task found" in capsys.readouterr().out


def test_the_api_searches_and_refuses_bad_parameters(ended: Broker, server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=5) as http:
        reply = http.get("/api/history", params={"queue": ended.queue, "state": "dead,cancelled"})
        assert reply.status_code == 200
        body = reply.json()
        assert [t["task_id"] for t in body["tasks"]] == ["ord-4", "ord-2"]
        assert body["complete"] is True and body["tasks"][1]["last_error"] == "ValueError: no stock"
        named = http.get("/api/history", params={"queue": ended.queue, "name": "invoice"})
        assert [t["task_id"] for t in named.json()["tasks"]] == ["inv-3"]
        for params in ({"state": "running"}, {"limit": "5000"}, {"prefix": "x" * 300}):
            bad = http.get("/api/history", params={"queue": ended.queue, **params})
            assert bad.status_code == 400, params
            assert bad.json()["parameter"] == next(iter(params))

