"""`taskq serve` over real HTTP: access control (token, cookie, same-origin writes,
loopback-only without a token), the JSON API and /metrics."""

from __future__ import annotations

import contextlib
import logging
import subprocess
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
import redis

from helpers import events, lease_one, this_hours_tick, wait_past
from serve_support import TIMEOUT, TOKEN, FeedStream, Server, enqueue, feed, metric, server_env
from taskq import App
from taskq.broker import Broker, NewTask
from taskq.concurrency import ConcurrencyLimit
from taskq.flows import Flows, StageSpec
from taskq.keys import QUEUES_KEY
from taskq.processes import taskq_command
from taskq.rates import RateLimit
from taskq.results import Failure
from taskq.schedules import Schedule, make_schedule
from taskq.settings import Settings
from taskq.shards import SHARDS_KEY, Layout, register, slot_of
from taskq.snapshot import queue_names
from taskq.tools.embedded import EmbeddedRedis, free_port
from waiting import wait_until

# -- access control ------------------------------------------------------------------


def test_with_a_token_everything_but_healthz_needs_it(secured: Server, queue: Broker) -> None:
    bearer = {"authorization": f"Bearer {TOKEN}"}
    wrong = {"authorization": "Bearer not-the-token-at-all"}
    with httpx.Client(base_url=secured.url, timeout=TIMEOUT) as http:
        assert http.get("/healthz").status_code == 200
        for path in ("/events", "/api/queues", "/api/dlq", "/api/schedules", "/api/limits",
                     "/api/shards", "/api/totals", "/api/throughput", "/api/workers",
                     "/api/history", "/api/flows/x", "/metrics", "/"):
            assert http.get(path).status_code == 401, path
            assert http.get(path, headers=wrong).status_code == 401, path
        assert http.get("/api/queues", headers=bearer).status_code == 200
        with http.stream("GET", "/events", headers=bearer,
                         params={"queue": queue.queue}) as response:
            assert response.status_code == 200
            assert FeedStream(response).next().retry == "1000"


def test_opening_the_page_with_the_token_sets_a_cookie_that_opens_the_feed(
    secured: Server, queue: Broker
) -> None:
    enqueue(queue, 1)
    with httpx.Client(base_url=secured.url, timeout=TIMEOUT) as http:
        login = http.get("/", params={"token": TOKEN})
        assert login.status_code == 303 and login.headers["location"] == "/"
        # A link to a queue keeps it; the token alone is dropped, a hostile value encoded.
        to_queue = http.get("/", params={"queue": "emails", "token": TOKEN})
        assert to_queue.headers["location"] == "/?queue=emails"
        hostile = http.get("/", params={"token": TOKEN, "queue": "a\r\nSet-Cookie: x=1"})
        assert hostile.headers["location"] == "/?queue=a%0D%0ASet-Cookie%3A+x%3D1"
        assert "x=1" not in hostile.headers.get("set-cookie", "").split(";")[0]
        cookie = login.headers["set-cookie"]
        assert cookie.startswith(f"taskq_token={TOKEN};")
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    with httpx.Client(base_url=secured.url, timeout=TIMEOUT) as http:  # no cookie yet
        assert http.get("/", params={"token": "wrong-token-123"}).status_code == 401
    with feed(secured, queue, headers={"cookie": f"taskq_token={TOKEN}"}) as stream:
        assert [b.seq for b in stream.rows_until_quiet() if b.is_row] == [1]
    with httpx.Client(base_url=secured.url, timeout=TIMEOUT) as http:
        stale = http.get("/api/queues", headers={"cookie": "taskq_token=wrong-token-123"})
        assert stale.status_code == 401


def test_the_token_cookie_works_beside_cookies_of_other_apps(
    secured: Server, queue: Broker
) -> None:
    """Other apps on this host (any port) add their cookies, some unquoted with spaces."""
    enqueue(queue, 1)
    others = [f"pref=dark mode; taskq_token={TOKEN}", f'a="b; taskq_token={TOKEN}; c=d e',
              f"taskq_token={TOKEN}; x=[y]; z=\"", f"session=; taskq_token={TOKEN};"]
    with httpx.Client(base_url=secured.url, timeout=TIMEOUT) as http:
        for cookie in others:
            response = http.get("/api/queues", headers={"cookie": cookie})
            assert response.status_code == 200, (cookie, response.text)
    with feed(secured, queue, headers={"cookie": others[0]}) as stream:
        assert [b.seq for b in stream.rows_until_quiet() if b.is_row] == [1]


WRITES = ("/api/dlq/{}/retry", "/api/dlq/{}/cancel", "/api/tasks/{}/cancel",
          "/api/dlq/retry-all", "/api/dlq/cancel-all", "/api/schedules/{}/forget?force=1")


def test_writes_need_the_request_header_and_the_same_origin(
    secured: Server, queue: Broker
) -> None:
    queue.enqueue("kept", delay=3600)
    queue.fire(hourly("kept"))
    bearer = {"authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=secured.url, timeout=TIMEOUT,
                      params={"queue": queue.queue}) as http:
        for write in WRITES:
            path = write.format("kept")
            assert http.post(path, headers=bearer).status_code == 403, path
            for origin in ("http://evil.example", f"{secured.url}.evil.example",
                           f"{secured.url}0"):
                foreign = {**bearer, "x-taskq-request": "1", "origin": origin}
                assert http.post(path, headers=foreign).status_code == 403, (path, origin)
            assert http.post(path, headers={"x-taskq-request": "1"}).status_code == 401, path
            # What a cross-site form would carry: the browser's cookie, no header.
            cookie_only = {"cookie": f"taskq_token={TOKEN}"}
            assert http.post(path, headers=cookie_only).status_code == 403, path
        record = queue.task("kept")
        assert record is not None and record.state == "delayed", "a refused write changed it"
        assert queue.schedule_state("kept") is not None, "a refused forget forgot it"
        own = {**bearer, "x-taskq-request": "1", "origin": secured.url}
        # Allowed: kept is not dead, so the retry finds nothing; the cancel ends it.
        assert http.post("/api/dlq/kept/retry", headers=own).status_code == 404
        cancelled = http.post("/api/tasks/kept/cancel", headers=own)
        assert (cancelled.status_code, cancelled.json()["outcome"]) == (200, "cancelled")


def test_serving_beyond_loopback_without_a_token_is_refused(
    redis_server: EmbeddedRedis, tmp_path: Path
) -> None:
    env = server_env(redis_server, tmp_path)
    argv = taskq_command("serve", "--host", "0.0.0.0", "--port", str(free_port()))
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done
    assert "refusing to serve on '0.0.0.0' without TASKQ_API_TOKEN" in done.stderr
    assert "Traceback" not in done.stderr


# -- the JSON API and /metrics -------------------------------------------------------


def fill(queue: Broker) -> None:
    """One dead task, two ready, one leased, one delayed."""
    queue.enqueue("dead-1", max_retries=0)
    got = queue.lease("w", 30)
    assert got is not None and got[0] == "dead-1"
    assert queue.fail(*got, error="it broke").status == "dead"
    enqueue(queue, 3, "ready")
    assert queue.lease("w", 30) is not None
    queue.enqueue("later", delay=3600)


def test_api_queues_counts_each_structure(server: Server, queue: Broker) -> None:
    fill(queue)
    reply = httpx.get(f"{server.url}/api/queues", timeout=TIMEOUT).json()
    mine = [q for q in reply["queues"] if q["name"] == queue.queue]
    assert mine == [{"name": queue.queue, "ready": 2, "leased": 1, "delayed": 1, "dead": 1}]
    assert reply["default"] == "default"  # the server's own (TASKQ_QUEUE), for the page


def test_a_layout_written_by_hand_that_names_no_shard_is_a_409_saying_how_to_mend_it(
    server: Server, queue: Broker
) -> None:
    queue.client.hset(SHARDS_KEY, "emails", "emails~1,emails~x,emails~2")
    try:
        for asked in ("emails", "emails~1"):
            reply = httpx.get(f"{server.url}/api/shards", params={"queue": asked},
                              timeout=TIMEOUT)
            assert reply.status_code == 409, reply.text
            assert f"HDEL {SHARDS_KEY} emails" in reply.json()["error"]
    finally:
        queue.client.hdel(SHARDS_KEY, "emails")


def test_api_queues_lists_names_alone_when_asked(server: Server, queue: Broker) -> None:
    fill(queue)
    reply = httpx.get(f"{server.url}/api/queues?names=1", timeout=TIMEOUT).json()
    assert {"name": queue.queue} in reply["queues"]
    assert all(list(q) == ["name"] for q in reply["queues"])
    bad = httpx.get(f"{server.url}/api/queues?names=yes", timeout=TIMEOUT)
    assert bad.status_code == 400 and bad.json()["parameter"] == "names"


def test_a_member_of_the_queue_registry_that_is_no_queue_name_fails_no_listing(
    server: Server, queue: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    """Something other than taskq put a bad name in the registry: the queues, /metrics
    and the snapshot still answer, without it, and the server says why once."""
    fill(queue)
    bad = ["not a queue name", "x" * 500]
    queue.client.sadd(QUEUES_KEY, *bad)
    reply = httpx.get(f"{server.url}/api/queues", timeout=TIMEOUT)
    assert reply.status_code == 200
    assert queue.queue in [q["name"] for q in reply.json()["queues"]]
    assert "not a queue name" not in reply.text
    metrics = httpx.get(f"{server.url}/metrics", timeout=TIMEOUT)
    assert metrics.status_code == 200 and queue.queue in metrics.text
    with caplog.at_level(logging.WARNING, logger="taskq"):
        listed = [queue_names(queue) for _ in range(2)]
    assert listed[0] == listed[1] == sorted(
        str(name) for name in queue.client.smembers(QUEUES_KEY) if name not in bad)
    warned = [r.getMessage() for r in caplog.records if "not listed" in r.getMessage()]
    assert len(warned) == 1 and "invalid queue name 'not a queue name'" in warned[0]
    assert warned[0].endswith("(and 1 more such members)")


def test_one_record_holding_what_is_no_number_fails_no_listing(
    server: Server, queue: Broker
) -> None:
    """A dead record and a worker's edited by hand: every listing still answers."""
    fill(queue)
    queue.client.hset(queue.keys.task("dead-1"), mapping={
        "retries": "abc", "run_at": "1e400", "created_at": "nan", "dead_at": "?"})
    queue.client.hset(queue.keys.stats, "enqueued:pending", "x")
    queue.client.hset(queue.keys.worker("w-odd"), mapping={"worker_id": "w-odd",
                                                           "pid": "abc", "last_beat": "?"})
    queue.client.zadd(queue.keys.workers, {"w-odd": 2**40})
    with httpx.Client(base_url=server.url, params={"queue": queue.queue},
                      timeout=TIMEOUT) as http:
        for path in ("/api/snapshot", "/api/dlq", "/api/history", "/api/tasks/dead-1",
                     "/api/totals", "/api/workers", "/metrics"):
            assert http.get(path).status_code == 200, path


def test_a_leased_task_whose_cancel_request_is_no_finite_number_fails_no_snapshot(
    server: Server, queue: Broker
) -> None:
    queue.enqueue("t1")
    assert queue.lease("w", 30) is not None
    for value in ("nan", "inf", "1e400", "?"):
        queue.client.hset(queue.keys.task("t1"), "cancel_requested", value)
        got = httpx.get(f"{server.url}/api/snapshot", params={"queue": queue.queue},
                        timeout=TIMEOUT)
        assert got.status_code == 200, value


def metrics_beside(server: Server, queue: Broker, damaged: str) -> tuple[Broker, httpx.Response]:
    """/metrics, answered 200, once `queue` (filled) has its key `damaged` of another type
    beside another queue with one task ready; and that other queue."""
    other = Broker(queue.client, f"{queue.queue}-other")
    fill(queue)
    other.enqueue("o1")
    queue.client.delete(damaged)
    queue.client.set(damaged, "not taskq's")
    metrics = httpx.get(f"{server.url}/metrics", timeout=TIMEOUT)
    assert metrics.status_code == 200
    return other, metrics


def test_totals_of_another_type_leave_that_queues_counters_out_of_metrics_alone(
    server: Server, queue: Broker
) -> None:
    other, metrics = metrics_beside(server, queue, queue.keys.stats)
    assert f'taskq_enqueued_total{{queue="{other.queue}"}} 1' in metrics.text
    assert f'taskq_enqueued_total{{queue="{queue.queue}"}}' not in metrics.text
    assert f"# queue {queue.queue}'s totals are left out: " in metrics.text
    assert f'taskq_tasks{{queue="{queue.queue}",structure="ready"}}' in metrics.text
    totals = httpx.get(f"{server.url}/api/totals", params={"queue": queue.queue},
                       timeout=TIMEOUT)
    assert totals.status_code == 409 and "WRONGTYPE" in totals.json()["error"]


def test_a_queue_whose_keys_hold_another_type_leaves_only_its_counts_out(
    server: Server, queue: Broker
) -> None:
    """One queue's DLQ of another type answered /metrics and /api/queues with a 409 for
    every queue, naming none."""
    other, metrics = metrics_beside(server, queue, queue.keys.dlq)
    assert f'taskq_tasks{{queue="{other.queue}",structure="ready"}} 1' in metrics.text
    assert f'taskq_tasks{{queue="{queue.queue}",' not in metrics.text
    assert (f"# queue {queue.queue}'s task counts are left out: Redis could not count the "
            f"tasks of queue '{queue.queue}': ") in metrics.text
    listed = httpx.get(f"{server.url}/api/queues", timeout=TIMEOUT).json()["queues"]
    by_name = {q["name"]: q for q in listed}
    assert by_name[other.queue]["ready"] == 1
    assert "WRONGTYPE" in by_name[queue.queue]["error"]


def test_api_tasks_shows_a_record_and_404s_a_missing_one(server: Server, queue: Broker) -> None:
    fill(queue)
    with httpx.Client(base_url=server.url, params={"queue": queue.queue},
                      timeout=TIMEOUT) as http:
        record = http.get("/api/tasks/dead-1").json()
        assert (record["task_id"], record["state"], record["last_error"]) == (
            "dead-1", "dead", "it broke")
        assert http.get("/api/tasks/later").json()["state"] == "delayed"
        missing = http.get("/api/tasks/nope")
        assert missing.status_code == 404 and "nope" in missing.json()["error"]


def test_a_deeply_nested_result_is_given_as_stored_not_indented_a_thousandfold(
    server: Server, queue: Broker
) -> None:
    """Indentation grows with depth on every line: 2,000 zeros 200 lists deep (as deep
    as a result may nest), 4 kB as stored, would indent to over 800 kB."""
    stored = "[" * 200 + ",".join(["0"] * 2000) + "]" * 200
    queue.enqueue("deep")
    leased = queue.lease("w-1", 30)
    assert leased is not None
    assert queue.ack("deep", leased[1], stored)
    body = httpx.get(f"{server.url}/api/tasks/deep", params={"queue": queue.queue},
                     timeout=TIMEOUT).json()
    assert body["result_json"] == stored
    assert body["result_bytes"] == len(stored)


def test_api_tasks_gives_a_completed_tasks_result_decoded_and_its_events(
    server: Server, queue: Broker
) -> None:
    queue.enqueue("sum", name="jobs.add")
    leased = queue.lease("w-1", 30)
    assert leased is not None
    assert queue.ack("sum", leased[1], '{"total":3,"who":"zoë"}')
    body = httpx.get(f"{server.url}/api/tasks/sum", params={"queue": queue.queue},
                     timeout=TIMEOUT).json()
    assert (body["state"], body["name"], body["attempts"]) == ("completed", "jobs.add", 1)
    assert body["result"] == {"total": 3, "who": "zoë"}
    assert body["result_json"] == '{\n  "total": 3,\n  "who": "zoë"\n}'
    assert body["result_bytes"] == len('{"total":3,"who":"zoë"}'.encode())
    assert body["error"] is None
    assert [(e["seq"], e["type"], e["state"]) for e in body["events"]] == [
        (1, "enqueued", "pending"), (2, "leased", "running"), (3, "completed", "completed")]
    assert body["events"][1]["token"] == leased[1]
    assert body["events_scan"] == {"read": 3, "end": "enqueued", "complete": True}


def test_api_tasks_scans_at_most_scan_log_entries_for_the_events(
    server: Server, queue: Broker
) -> None:
    queue.enqueue("old")
    enqueue(queue, 4, "new")
    with httpx.Client(base_url=server.url, params={"queue": queue.queue},
                      timeout=TIMEOUT) as http:
        none = http.get("/api/tasks/old", params={"scan": "0"}).json()
        short = http.get("/api/tasks/old", params={"scan": "3"}).json()
        whole = http.get("/api/tasks/old").json()
    assert (none["state"], none["events"]) == ("pending", [])
    assert short["events"] == []
    assert short["events_scan"] == {"read": 3, "end": "limit", "complete": False}
    assert [e["type"] for e in whole["events"]] == ["enqueued"]
    assert whole["events_scan"] == {"read": 5, "end": "enqueued", "complete": True}


def test_api_tasks_gives_a_dead_tasks_error_with_its_traceback(
    server: Server, queue: Broker
) -> None:
    queue.enqueue("doomed", max_retries=0)
    leased = queue.lease("w-1", 30)
    assert leased is not None
    trace = 'Traceback (most recent call last):\n  File "jobs.py", line 3\nKeyError: 7\n'
    queue.fail("doomed", leased[1], Failure("builtins.KeyError", "7", trace))
    body = httpx.get(f"{server.url}/api/tasks/doomed", params={"queue": queue.queue},
                     timeout=TIMEOUT).json()
    assert body["error"] == {"type": "builtins.KeyError", "message": "7", "traceback": trace}
    assert (body["state"], body["result"], body["result_bytes"]) == ("dead", None, None)
    assert body["events"][-1]["type"] == "failed"


def flow_step(name: str) -> tuple[object, ...]:
    """A step as start_flow takes it: no arguments, no retries, default priority."""
    return (name, '{"args":[],"kwargs":{}}', 0, "", 5, "")


def start_chord(queue: Broker, flow_id: str) -> None:
    """fetch, then a group of two parse steps, then store."""
    assert Flows(queue).start(flow_id, [
        StageSpec((flow_step("fetch"),), group=False, policy="fail"),
        StageSpec((flow_step("parse"), flow_step("parse")), group=True, policy="fail"),
        StageSpec((flow_step("store"),), group=False, policy="fail")])


def steps_of(body: dict[str, object]) -> list[tuple[str, str, str]]:
    steps = body["steps"]
    assert isinstance(steps, list)
    return [(s["task_id"], s["name"], s["state"]) for s in steps]


def test_api_flows_gives_each_steps_state_as_the_workflow_moves_on(
    server: Server, queue: Broker
) -> None:
    start_chord(queue, "nightly-1")
    with httpx.Client(base_url=server.url, params={"queue": queue.queue},
                      timeout=TIMEOUT) as http:
        body = http.get("/api/flows/nightly-1").json()
        assert {k: body[k] for k in ("flow_id", "state", "stage", "stages", "groups",
                                     "policies", "upstream", "ended_at_ms")} == {
            "flow_id": "nightly-1", "state": "running", "stage": 1, "stages": 3,
            "groups": [False, True, False], "policies": ["fail", "fail", "fail"],
            "upstream": "", "ended_at_ms": None}
        assert body["created_at_ms"] > 0
        assert steps_of(body) == [("nightly-1.1.1", "fetch", "pending"),
                                  ("nightly-1.2.1", "parse", "waiting"),
                                  ("nightly-1.2.2", "parse", "waiting"),
                                  ("nightly-1.3.1", "store", "waiting")]
        assert body["steps"][1] == {"task_id": "nightly-1.2.1", "stage": 2, "index": 1,
                                    "name": "parse", "state": "waiting", "retries": 0,
                                    "upstream": ""}

        assert queue.ack(*lease_one(queue), "1")
        first, second = lease_one(queue), lease_one(queue)
        body = http.get("/api/flows/nightly-1").json()
        assert (body["state"], body["stage"]) == ("running", 2)
        assert [s[2] for s in steps_of(body)] == ["completed", "running", "running", "waiting"]

        assert queue.fail(*first, Failure("builtins.KeyError", "'title'")).status == "dead"
        assert queue.ack(*second, "2")
        body = http.get("/api/flows/nightly-1").json()
        totals = http.get("/api/totals").json()["totals"]
    # Every step counts as created when the workflow starts, waiting ones too.
    assert {k: totals[k] for k in ("enqueued", "completed", "dead", "cancelled")} == {
        "enqueued": 4, "completed": 2, "dead": 1, "cancelled": 1}
    assert (body["state"], body["upstream"], body["error_type"]) == (
        "failed", first[0], "builtins.KeyError")
    assert f"{first[0]} (dead: builtins.KeyError: 'title')" in body["error_message"]
    assert body["ended_at_ms"] >= body["created_at_ms"]
    assert [s[2] for s in steps_of(body)] == ["completed", "dead", "completed", "cancelled"]
    assert [s["upstream"] for s in body["steps"]] == ["", "", "", first[0]]


def test_api_flows_of_a_damaged_record_is_a_409_naming_it_not_an_outage(
    server: Server, queue: Broker, client: redis.Redis
) -> None:
    """It was a 503 "Redis is unavailable" with a Retry-After no retry could honour."""
    start_chord(queue, "hurt")
    client.hset(queue.keys.flow("hurt"), "stages", "lots")
    with httpx.Client(base_url=server.url, params={"queue": queue.queue},
                      timeout=TIMEOUT) as http:
        damaged = http.get("/api/flows/hurt")
    assert damaged.status_code == 409, damaged.text
    assert "flow hurt has a damaged record: stages is lots" in damaged.json()["error"]


def test_api_flows_404s_a_missing_workflow_and_400s_a_bad_id(
    server: Server, queue: Broker
) -> None:
    start_chord(queue, "here")
    with httpx.Client(base_url=server.url, params={"queue": queue.queue},
                      timeout=TIMEOUT) as http:
        missing = http.get("/api/flows/nope")
        assert missing.status_code == 404
        assert missing.json()["error"].startswith("no workflow 'nope' on this queue")
        # A step's task id is not a workflow's id.
        assert http.get("/api/flows/here.1.1").status_code == 400
        elsewhere = http.get("/api/flows/here", params={"queue": "other-queue"})
        assert elsewhere.status_code == 404
        for bad in ("no%20spaces", "a" * 101, "%00", "%F0%9F%9A%80", "a.b"):
            response = http.get(f"/api/flows/{bad}")
            assert response.status_code == 400, (bad, response.text)
            body = response.json()
            assert body["parameter"] == "flow_id"
            assert body["accepted"] == "a workflow id: 1-100 letters, digits, '_' or '-'"
        assert http.post("/api/flows/here", headers=WRITE).status_code == 405


def test_api_dlq_lists_the_dead_and_retry_revives_them_once(
    server: Server, queue: Broker
) -> None:
    fill(queue)
    write = {"x-taskq-request": "1"}
    with httpx.Client(base_url=server.url, params={"queue": queue.queue},
                      timeout=TIMEOUT) as http:
        dead = http.get("/api/dlq").json()["dead"]
        assert [(d["task_id"], d["last_error"]) for d in dead] == [("dead-1", "it broke")]
        assert http.post("/api/dlq/dead-1/retry").status_code == 403  # no request header
        assert http.post("/api/dlq/dead-1/retry", headers=write).json() == {"retried": "dead-1"}
        assert http.get("/api/tasks/dead-1").json()["state"] == "pending"
        assert http.post("/api/dlq/dead-1/retry", headers=write).status_code == 404
        assert http.post("/api/dlq/ready-0/retry", headers=write).status_code == 404
        assert http.get("/api/dlq").json()["dead"] == []


def test_a_dlq_rows_cancel_ends_a_dead_task_and_leaves_one_revived_meanwhile(
    server: Server, queue: Broker
) -> None:
    """The row's Cancel used the task route, which cancels wherever the task has got
    to: a task another operator had just sent back to ready ended cancelled."""
    for task_id in ("revived", "doomed"):
        queue.enqueue(task_id, max_retries=0)
        got = queue.lease("w", 30)
        assert got is not None and got[0] == task_id
        assert queue.fail(*got, error="it broke").status == "dead"
    write = {"x-taskq-request": "1"}
    with httpx.Client(base_url=server.url, params={"queue": queue.queue},
                      timeout=TIMEOUT) as http:
        assert http.post("/api/dlq/revived/retry", headers=write).status_code == 200
        stale = http.post("/api/dlq/revived/cancel", headers=write)
        assert stale.status_code == 404
        assert stale.json()["error"] == ("task 'revived' is not in the DLQ (it is pending); "
                                         "nothing cancelled")
        assert http.get("/api/tasks/revived").json()["state"] == "pending"
        assert http.post("/api/dlq/nobody/cancel", headers=write).json()["error"] == (
            "task 'nobody' is not in the DLQ (no such task); nothing cancelled")
        done = http.post("/api/dlq/doomed/cancel", headers=write)
        assert (done.status_code, done.json()["outcome"]) == (200, "cancelled")
        assert http.get("/api/dlq").json()["dead"] == []


def test_bulk_writes_retry_or_cancel_every_dead_task_each_with_its_event(
    server: Server, queue: Broker
) -> None:
    for n in range(3):
        queue.enqueue(f"d{n}", max_retries=0)
        (task,) = queue.lease_many("w", 30, 1).tasks
        queue.fail(task.task_id, task.token, "broke")
    with httpx.Client(base_url=server.url, params={"queue": queue.queue},
                      timeout=TIMEOUT) as http:
        assert http.post("/api/dlq/retry-all").status_code == 403  # no request header
        retried = http.post("/api/dlq/retry-all", headers=WRITE).json()
        assert (sorted(retried["done"]), retried["missed"], retried["left"]) == (
            ["d0", "d1", "d2"], [], 0)
        for task in queue.lease_many("w", 30, 3).tasks:
            queue.fail(task.task_id, task.token, "broke again", dead=True)
        cancelled = http.post("/api/dlq/cancel-all", headers=WRITE).json()
        assert sorted(cancelled["done"]) == ["d0", "d1", "d2"] and cancelled["left"] == 0
        assert http.post("/api/dlq/cancel-all", headers=WRITE).json() == {
            "done": [], "missed": [], "left": 0, "unusable": []}
    kinds = [e.type for e in events(queue.client, queue.keys)]
    assert kinds.count("revived") == 3 and kinds.count("cancelled") == 3


WRITE = {"x-taskq-request": "1"}


def cancel(http: httpx.Client, task_id: str) -> httpx.Response:
    return http.post(f"/api/tasks/{task_id}/cancel", headers=WRITE)


def test_cancel_ends_a_task_that_is_not_running_and_says_what_it_was(
    server: Server, queue: Broker
) -> None:
    fill(queue)  # dead-1 dead, ready-0 running, ready-1 and ready-2 pending, later delayed
    with httpx.Client(base_url=server.url, params={"queue": queue.queue},
                      timeout=TIMEOUT) as http:
        for task_id, state in (("later", "delayed"), ("ready-2", "pending"),
                               ("dead-1", "dead")):
            response = cancel(http, task_id)
            assert response.status_code == 200, response.text
            assert response.json() == {"task_id": task_id, "outcome": "cancelled",
                                       "state": state}
            record = http.get(f"/api/tasks/{task_id}").json()
            assert record["state"] == "cancelled" and record["cancelled_at"] > 0
            assert [e["type"] for e in record["events"]][-1] == "cancelled"
            assert record["events"][-1]["from"] == state
        assert cancel(http, "later").json() == {
            "task_id": "later", "outcome": "unchanged", "state": "cancelled"}
        assert http.get("/api/snapshot").json()["counts"] == {
            "ready": 1, "leased": 1, "delayed": 0, "dead": 0}
        assert http.get("/api/dlq").json()["dead"] == []


def test_cancel_of_a_running_task_asks_its_worker_once(server: Server, queue: Broker) -> None:
    queue.enqueue("busy")
    leased = queue.lease("w-1", 30)
    assert leased is not None
    with httpx.Client(base_url=server.url, params={"queue": queue.queue},
                      timeout=TIMEOUT) as http:
        assert http.get("/api/snapshot").json()["leased"][0]["cancel_requested_at"] == 0
        assert cancel(http, "busy").json() == {
            "task_id": "busy", "outcome": "requested", "state": "running"}
        record = http.get("/api/tasks/busy").json()
        assert record["state"] == "running" and record["cancel_requested_at"] > 0
        assert record["events"][-1]["type"] == "cancel_requested"
        (row,) = http.get("/api/snapshot").json()["leased"]
        assert row["cancel_requested_at"] == record["cancel_requested_at"]
        assert cancel(http, "busy").json()["outcome"] == "unchanged"
        assert queue.ack_cancelled("busy", leased[1])
        assert http.get("/api/tasks/busy").json()["state"] == "cancelled"
        assert http.get("/api/totals").json() == {"queue": queue.queue, "totals": {
            "enqueued": 1, "completed": 0, "failed": 0, "retried": 0, "reaped": 0,
            "dead": 0, "cancelled": 1}}


def test_cancel_of_a_task_that_is_not_there_is_a_404_and_of_a_bad_id_a_400(
    server: Server, queue: Broker
) -> None:
    queue.enqueue("here")
    with httpx.Client(base_url=server.url, params={"queue": queue.queue},
                      timeout=TIMEOUT) as http:
        missing = cancel(http, "nope")
        assert missing.status_code == 404
        assert missing.json() == {"error": "no task 'nope' on this queue"}
        bad = cancel(http, "no%20spaces")
        assert bad.status_code == 400 and bad.json()["parameter"] == "task_id"
        assert http.get("/api/tasks/cancel", headers=WRITE).status_code == 404
        for method in ("GET", "PUT", "DELETE"):
            response = http.request(method, "/api/tasks/here/cancel", headers=WRITE)
            assert response.status_code == 405, method
    record = queue.task("here")
    assert record is not None and record.state == "pending"


def test_totals_count_each_kind_of_end_over_the_queues_life(
    server: Server, queue: Broker
) -> None:
    fill(queue)  # 5 enqueued, 1 failed into the DLQ
    queue.enqueue("kept", delay=3600)
    queue.cancel("kept")
    queue.cancel("dead-1")
    leased = queue.lease("w-1", 30)
    assert leased is not None and queue.ack(leased[0], leased[1])
    with httpx.Client(base_url=server.url, params={"queue": queue.queue},
                      timeout=TIMEOUT) as http:
        assert http.get("/api/totals").json()["totals"] == {
            "enqueued": 6, "completed": 1, "failed": 1, "retried": 0, "reaped": 0,
            "dead": 1, "cancelled": 2}
        assert http.get("/api/totals", params={"queue": "unused"}).json()["totals"] == {
            "enqueued": 0, "completed": 0, "failed": 0, "retried": 0, "reaped": 0,
            "dead": 0, "cancelled": 0}
    assert metric(server, "taskq_cancelled_total", queue) == 2
    assert metric(server, "taskq_completions_total", queue) == 1


def run_each(queue: Broker, n: int, failing: str = "") -> None:
    """Lease `n` tasks one at a time; ack each, but fail the one named `failing`."""
    for _ in range(n):
        leased = queue.lease("w-1", 30)
        assert leased is not None
        if leased[0] == failing:
            assert queue.fail(*leased, error="it broke").status == "retry"
        else:
            assert queue.ack(*leased)


def test_throughput_counts_the_last_minutes_completions_and_failed_attempts(
    server: Server, queue: Broker
) -> None:
    queue.enqueue_many([NewTask(f"ok-{i}") for i in range(3)] + [NewTask("bad")])
    run_each(queue, 4, failing="bad")
    with httpx.Client(base_url=server.url, params={"queue": queue.queue},
                      timeout=TIMEOUT) as http:
        body = http.get("/api/throughput").json()
        # The log holds the queue's first event: it accounts for the whole minute.
        assert {k: body[k] for k in ("queue", "window_ms", "completed", "failed",
                                     "completed_per_min", "failed_per_min")} == {
            "queue": queue.queue, "window_ms": 60_000, "completed": 3, "failed": 1,
            "completed_per_min": 3.0, "failed_per_min": 1.0}
        assert body["now_ms"] >= queue.server_time_ms() - 60_000

        # Only what happened within the window asked for is counted.
        last = int(queue.client.xrevrange(queue.keys.events, count=1)[0][1]["ts"])
        wait_until(lambda: queue.server_time_ms() > last + 1000, 5)
        queue.enqueue("late")
        run_each(queue, 1)
        late = http.get("/api/throughput", params={"window": "1"}).json()
        assert (late["window_ms"], late["completed"], late["failed"]) == (1000, 1, 0)
        assert late["completed_per_min"] == 60.0

        refused = http.get("/api/throughput", params={"window": "0"})
        assert refused.status_code == 400 and refused.json()["parameter"] == "window"


def test_throughput_counts_over_the_span_a_trimmed_log_still_covers(
    server: Server, client: redis.Redis, queue: Broker
) -> None:
    # Retention is applied when an event is written: the writer's setting trims the log.
    short = Broker(client, queue.queue, events_retention=5)
    short.enqueue_many([NewTask(f"t-{i}") for i in range(6)])
    held = short.lease_many("w-1", 30, 6).tasks
    assert len(held) == 6 and all(short.ack_many([(t.task_id, t.token) for t in held]))
    body = httpx.get(f"{server.url}/api/throughput", params={"queue": queue.queue},
                     timeout=TIMEOUT).json()
    # Five completions are left in the log, and nothing of what came before them.
    assert body["completed"] == 5
    assert 1 <= body["window_ms"] < 60_000
    assert body["completed_per_min"] == 5 * 60_000 / body["window_ms"]


def test_a_crowd_asking_for_the_throughput_at_once_costs_one_reading(
    server: Server, client: redis.Redis, queue: Broker
) -> None:
    queue.enqueue_many([NewTask(f"t-{i}") for i in range(3)])
    run_each(queue, 3)

    def scans() -> int:
        return int(client.info("commandstats").get("cmdstat_xrevrange", {}).get("calls", 0))

    before = scans()
    with httpx.Client(base_url=server.url, params={"queue": queue.queue},
                      timeout=TIMEOUT) as http, ThreadPoolExecutor(20) as pool:
        bodies = list(pool.map(lambda _: http.get("/api/throughput").json(), range(20)))
    # The log fits in one XREVRANGE: one reading, given to all twenty.
    assert scans() - before == 1
    assert {(b["completed"], b["now_ms"]) for b in bodies} == {(3, bodies[0]["now_ms"])}


TIME_LIMIT_ERROR = "taskq.errors.TimeLimitExceeded"


def failed_once(queue: Broker, task_id: str, max_retries: int, error_type: str) -> None:
    queue.enqueue(task_id, max_retries=max_retries)
    leased = queue.lease("w-1", 30)
    assert leased is not None and leased[0] == task_id
    queue.fail(task_id, leased[1], Failure(error_type, "it failed"))


def test_the_snapshot_and_the_dlq_give_each_failures_error_type(
    server: Server, queue: Broker
) -> None:
    failed_once(queue, "slow", 0, TIME_LIMIT_ERROR)
    failed_once(queue, "flaky", 3, "builtins.KeyError")
    with httpx.Client(base_url=server.url, params={"queue": queue.queue},
                      timeout=TIMEOUT) as http:
        snap = http.get("/api/snapshot").json()
        dead = http.get("/api/dlq").json()["dead"]
    for listed in (dead, snap["dead"]):
        assert [(d["task_id"], d["error_type"]) for d in listed] == [("slow", TIME_LIMIT_ERROR)]
    assert [(d["task_id"], d["error_type"]) for d in snap["delayed"]] == [
        ("flaky", "builtins.KeyError")]


def test_the_snapshot_tells_a_task_waiting_for_its_rate_limit_slot(
    server: Server, queue: Broker
) -> None:
    queue.rate_limits = (RateLimit("jobs.slow", 1.0),)
    queue.enqueue_many([NewTask(t, name="jobs.slow") for t in ("first", "second")])
    queue.enqueue("later", delay=60)
    assert [t.task_id for t in queue.lease_many("w", 30, 5).tasks] == ["first"]
    with httpx.Client(base_url=server.url, params={"queue": queue.queue},
                      timeout=TIMEOUT) as http:
        delayed = http.get("/api/snapshot").json()["delayed"]
    assert sorted((d["task_id"], d["throttled"]) for d in delayed) == [
        ("later", False), ("second", True)]


def test_api_schedules_lists_fired_schedules_with_their_last_and_next_ticks(
    server: Server, queue: Broker
) -> None:
    nightly = make_schedule(name="nightly", task="jobs.report", cron="0 3 * * *", every=None,
                            tz="Europe/Paris", args=("full",), kwargs={}, policy="skip",
                            grace=timedelta(minutes=5), max_retries=1)
    tidy = make_schedule(name="tidy", task="jobs.tidy", cron=None, every=timedelta(seconds=1),
                         tz=None, args=(), kwargs={}, policy="all",
                         grace=timedelta(minutes=1), max_retries=3)
    queue.fire(nightly)
    first = queue.fire(tidy)
    due = tidy.ticks(first.last_tick_ms, first.last_tick_ms + 1000, 10)
    # The server's clock, not ours, decides when a tick is due.
    wait_until(lambda: queue.server_time_ms() >= due[-1], 10, "the tick to fall due")
    fired = queue.fire(tidy, due, first.last_tick_ms)
    assert fired.task_ids == tuple(tidy.task_id(t) for t in due)

    body = httpx.get(f"{server.url}/api/schedules", params={"queue": queue.queue},
                     timeout=TIMEOUT).json()
    assert body["queue"] == queue.queue and body["now_ms"] >= due[-1]
    by_name = {s["name"]: s for s in body["schedules"]}
    assert list(by_name) == ["nightly", "tidy"]
    assert by_name["tidy"] == {
        "name": "tidy", "version": tidy.version, "definition": "current",
        "last_tick_ms": due[-1], "next_tick_ms": due[-1] + 1000, "task": "jobs.tidy",
        "when": "every 0:00:01", "cron": None, "tz": None, "every_ms": 1000, "policy": "all",
        "grace_ms": 60_000, "max_retries": 3}
    report = by_name["nightly"]
    assert (report["task"], report["when"], report["policy"], report["definition"]) == (
        "jobs.report", "cron '0 3 * * *' (Europe/Paris)", "skip", "current")
    assert report["next_tick_ms"] == nightly.next_tick(report["last_tick_ms"])


def hourly(name: str) -> Schedule:
    return make_schedule(name=name, task="jobs.tidy", cron=None, every=timedelta(hours=1),
                         tz=None, args=(), kwargs={}, policy="all",
                         grace=timedelta(minutes=1), max_retries=3)


def test_forget_takes_out_a_long_overdue_schedule_and_keeps_a_live_one_unless_forced(
    server: Server, queue: Broker, client: redis.Redis
) -> None:
    for name in ("live", "gone"):
        queue.fire(hourly(name))
    client.hset(queue.keys.schedules, "last:gone", queue.server_time_ms() - 7_300_000)
    client.hset(queue.keys.schedules, "last:live", this_hours_tick(queue.server_time_ms()))
    with httpx.Client(base_url=server.url, params={"queue": queue.queue},
                      timeout=TIMEOUT, headers=WRITE) as http:
        gone = http.post("/api/schedules/gone/forget")
        assert (gone.status_code, gone.json()["verdict"]) == (200, "forgotten")
        assert gone.json()["message"] == "schedule 'gone' forgotten; the tasks its ticks made stay"
        live = http.post("/api/schedules/live/forget")
        assert (live.status_code, live.json()["verdict"]) == (409, "alive")
        assert "kept: its next tick is due in" in live.json()["error"]
        assert [s["name"] for s in http.get("/api/schedules").json()["schedules"]] == ["live"]
        forced = http.post("/api/schedules/live/forget", params={"force": "1"})
        assert (forced.status_code, forced.json()["verdict"]) == (200, "forgotten")
        again = http.post("/api/schedules/live/forget", params={"force": "1"})
        assert (again.status_code, again.json()["verdict"]) == (404, "missing")
        bad = http.post("/api/schedules/a%20b/forget")
        assert bad.status_code == 400 and bad.json()["parameter"] == "name"
        flag = http.post("/api/schedules/live/forget", params={"force": "yes"})
        assert flag.status_code == 400 and flag.json()["parameter"] == "force"
        assert http.get("/api/schedules/live/forget").status_code == 405
    assert client.hgetall(queue.keys.schedules) == {}


def test_api_limits_gives_each_limits_slots_and_parked_tasks_in_one_read(
    server: Server, queue: Broker
) -> None:
    queue.concurrency_limits = (ConcurrencyLimit("jobs.export", 2),)
    queue.enqueue_many([NewTask(f"e{i}", name="jobs.export") for i in range(3)])
    queue.lease_many("w", 30, 10)
    body = httpx.get(f"{server.url}/api/limits", params={"queue": queue.queue},
                     timeout=TIMEOUT).json()
    assert body == {"queue": queue.queue, "limits": [
        {"name": "jobs.export", "most": 2, "running": 2, "parked": 1, "key": ""}]}


def test_api_shards_gives_each_shards_slot_counts_and_feed_position(
    server: Server, settings: Settings, client: redis.Redis
) -> None:
    app = App(queue=f"s-{uuid.uuid4().hex[:8]}", settings=settings, shards=3)
    assert app.layout is not None
    shards = [Broker(client, name) for name in app.layout.shards]
    shards[0].enqueue("dead-1", max_retries=0)
    got = shards[0].lease("w", 30)
    assert got is not None and shards[0].fail(*got, error="it broke").status == "dead"
    shards[1].enqueue("later", delay=3600)
    shards[2].enqueue("run-1")
    assert shards[2].lease("w", 30) is not None

    @app.task("send")
    def send(n: int) -> int:
        return n

    try:
        for n in range(30):
            send.enqueue(n)
    finally:
        app.producer.brokers[0].client.close()
    expected = []
    for broker in shards:
        snap = httpx.get(f"{server.url}/api/snapshot", params={"queue": broker.queue},
                         timeout=TIMEOUT).json()
        counts = broker.counts()
        assert snap["counts"] == {"ready": counts.ready, "leased": counts.leased,
                                  "delayed": counts.delayed, "dead": counts.dead}
        expected.append({"name": broker.queue, "slot": slot_of(broker.queue),
                         **snap["counts"], "position": snap["position"], "error": ""})
    assert sum(row["ready"] for row in expected) == 30
    assert all(row["ready"] > 0 for row in expected), expected
    assert [(row["leased"], row["delayed"], row["dead"]) for row in expected] == [
        (0, 0, 1), (0, 1, 0), (1, 0, 0)]
    # The sharded queue's own name and each shard's give the same view.
    for asked in (app.queue, *app.layout.shards):
        body = httpx.get(f"{server.url}/api/shards", params={"queue": asked},
                         timeout=TIMEOUT).json()
        assert body == {"queue": app.queue, "shards": expected}, asked


def test_api_shards_follow_from_each_position_exactly(
    server: Server, client: redis.Redis
) -> None:
    layout = Layout.of(f"s-{uuid.uuid4().hex[:8]}", 2)
    register(client, layout)
    first = Broker(client, layout.shards[0])
    enqueue(first, 2, "seen")
    body = httpx.get(f"{server.url}/api/shards", params={"queue": layout.queue},
                     timeout=TIMEOUT).json()
    assert [row["position"] for row in body["shards"]][1] == ""  # no event yet
    enqueue(first, 1, "new")
    with feed(server, first, query=body["shards"][0]["position"]) as stream:
        after = stream.rows_until_quiet()
    assert [(b.seq, b.body["task"]) for b in after if b.id] == [(3, "new-0")]


def test_writes_on_a_sharded_queue_reach_each_task_s_shard_or_say_to_ask_each(
    server: Server, client: redis.Redis
) -> None:
    """Its whole name is a plain queue holding none of its tasks: answered 'done' or
    404 there, as before, a write would say it acted when it did nothing."""
    layout = Layout.of(f"s-{uuid.uuid4().hex[:8]}", 3)
    register(client, layout)
    dead = []
    for n in range(6):
        task_id = f"d{n}"
        shard = Broker(client, layout.shard_of(task_id))
        shard.enqueue(task_id, max_retries=0)
        (task,) = shard.lease_many("w", 30, 1).tasks
        shard.fail(task.task_id, task.token, "broke")
        dead.append(task_id)
    with httpx.Client(base_url=server.url, params={"queue": layout.queue},
                      timeout=TIMEOUT) as http:
        assert http.get("/api/tasks/d0").json()["state"] == "dead"
        assert http.post("/api/dlq/d0/retry", headers=WRITE).json() == {"retried": "d0"}
        assert http.post("/api/tasks/d1/cancel", headers=WRITE).json()["outcome"] == \
            "cancelled"
        for path in ("/api/dlq/retry-all", "/api/dlq/cancel-all"):
            refused = http.post(path, headers=WRITE)
            assert refused.status_code == 409, path
            assert f"has 3 shards: ask each by its own name ({', '.join(layout.shards)})" \
                in refused.json()["error"]
        assert http.get("/api/history").status_code == 409
        # Reads of the whole name answered the plain queue's zeros, as if it were
        # empty and had no workers.
        for path in ("/api/snapshot", "/api/dlq", "/api/limits", "/api/workers",
                     "/api/totals", "/api/throughput", "/api/flows/f1"):
            refused = http.get(path)
            assert refused.status_code == 409, path
            assert "has 3 shards: ask each by its own name" in refused.json()["error"], path
        # A schedule's ticks are on the first shard, whatever their ids route to.
        first = Broker(client, layout.shards[0])
        tidy = make_schedule(name="tidy", task="jobs.tidy", cron=None,
                             every=timedelta(milliseconds=200), tz=None, args=(), kwargs={},
                             policy="all", grace=timedelta(minutes=1), max_retries=3)
        start = first.fire(tidy)
        due = tidy.ticks(start.last_tick_ms, start.last_tick_ms + 1000, 10)
        wait_until(lambda: first.server_time_ms() >= due[-1], 10, "the ticks to fall due")
        ticks = first.fire(tidy, due, start.last_tick_ms).task_ids
        assert len(ticks) == 5  # each routes elsewhere with chance 2/3
        for tick in ticks:
            assert http.get(f"/api/tasks/{tick}").json()["state"] == "pending", tick
    states = {t: Broker(client, layout.shard_of(t)).task(t) for t in dead}
    assert [(t, r.state if r else None) for t, r in states.items()][:2] == [
        ("d0", "pending"), ("d1", "cancelled")]
    assert all(r is not None and r.state == "dead" for t, r in states.items()
               if t not in ("d0", "d1"))


def test_api_shards_gives_a_shard_it_cannot_read_its_error_and_the_others_their_counts(
    server: Server, client: redis.Redis
) -> None:
    """One shard's ready list of another type failed the whole route with a 409, and
    the page, finding no shards, was left on the sharded queue's own name."""
    layout = Layout.of(f"s-{uuid.uuid4().hex[:8]}", 3)
    register(client, layout)
    Broker(client, layout.shards[0]).enqueue("a")
    client.set(Broker(client, layout.shards[2]).keys.ready, "not taskq's")
    reply = httpx.get(f"{server.url}/api/shards", params={"queue": layout.queue},
                      timeout=TIMEOUT)
    assert reply.status_code == 200
    first, _, damaged = reply.json()["shards"]
    assert (first["ready"], first["error"]) == (1, "")
    assert "WRONGTYPE" in damaged["error"]


def test_api_shards_of_a_plain_queue_is_an_empty_list(server: Server, queue: Broker) -> None:
    enqueue(queue, 1)
    for asked in (queue.queue, f"{queue.queue}~3"):
        body = httpx.get(f"{server.url}/api/shards", params={"queue": asked},
                         timeout=TIMEOUT).json()
        assert body == {"queue": asked, "shards": []}


def test_api_shards_refuses_a_bad_queue_name(server: Server) -> None:
    for bad in ("../etc", "mail~", "mail~x", "~1"):
        response = httpx.get(f"{server.url}/api/shards", params={"queue": bad}, timeout=TIMEOUT)
        assert response.status_code == 400, (bad, response.text)
        assert (response.json()["parameter"], response.json()["value"]) == ("queue", bad)


def test_api_schedules_of_a_queue_without_any_is_an_empty_list(
    server: Server, queue: Broker
) -> None:
    body = httpx.get(f"{server.url}/api/schedules", params={"queue": queue.queue},
                     timeout=TIMEOUT).json()
    assert (body["queue"], body["schedules"]) == (queue.queue, [])


def test_a_snapshot_position_resumes_the_feed_exactly_after_it(
    server: Server, queue: Broker
) -> None:
    enqueue(queue, 5, "seen")
    snap = httpx.get(f"{server.url}/api/snapshot", params={"queue": queue.queue},
                     timeout=TIMEOUT).json()
    assert snap["counts"]["ready"] == 5 and snap["seq"] == 5
    enqueue(queue, 3, "new")
    with feed(server, queue, query=snap["position"]) as stream:
        after = stream.rows_until_quiet()
    assert [(b.event, b.seq, b.body["task"]) for b in after if b.id] == [
        ("enqueued", 6, "new-0"), ("enqueued", 7, "new-1"), ("enqueued", 8, "new-2")]


def test_the_snapshot_lists_the_last_events_it_reflects_as_the_feed_sends_them(
    server: Server, client: redis.Redis, queue: Broker
) -> None:
    enqueue(queue, 5, "seen")
    with httpx.Client(base_url=server.url, params={"queue": queue.queue},
                      timeout=TIMEOUT) as http:
        assert http.get("/api/snapshot").json()["recent"] == []
        snap = http.get("/api/snapshot", params={"events": "3"}).json()
        recent = snap["recent"]
        assert [(e["seq"], e["type"], e["task"]) for e in recent] == [
            (3, "enqueued", "seen-2"), (4, "enqueued", "seen-3"), (5, "enqueued", "seen-4")]
        assert recent[-1]["id"] == snap["position"]
        with feed(server, queue, query=recent[0]["id"]) as stream:
            sent = [b.body for b in stream.rows_until_quiet() if b.is_row]
        assert sent == recent[1:]
        every = http.get("/api/snapshot", params={"events": "200"}).json()["recent"]
        assert [e["seq"] for e in every] == [1, 2, 3, 4, 5]

        # On a trimmed log, what retention kept.
        Broker(client, queue.queue, events_retention=4).enqueue_many(
            [NewTask(f"late-{i}") for i in range(6)])
        kept = http.get("/api/snapshot", params={"events": "50"}).json()["recent"]
        assert [e["seq"] for e in kept] == [8, 9, 10, 11]
        refused = http.get("/api/snapshot", params={"events": "201"})
        assert refused.status_code == 400 and refused.json()["parameter"] == "events"


def test_the_snapshot_the_record_and_the_feed_give_the_current_runs_progress(
    server: Server, queue: Broker
) -> None:
    """What the page draws its progress bars from: a leased row's and a record's
    `progress` (0 to 1, null until the run says) and `progress_message`, and the
    `progress` event (its permille as text), for the run that holds the lease alone."""
    queue.enqueue("long")
    _, first = lease_one(queue, seconds=0.05)
    with httpx.Client(base_url=server.url, params={"queue": queue.queue},
                      timeout=TIMEOUT) as http:
        (row,) = http.get("/api/snapshot").json()["leased"]
        assert (row["progress"], row["progress_message"]) == (None, "")
        position = http.get("/api/snapshot").json()["position"]
        assert queue.progress("long", first, 0.25, "1 of 4 files")
        (row,) = http.get("/api/snapshot").json()["leased"]
        assert (row["progress"], row["progress_message"]) == (0.25, "1 of 4 files")
        record = http.get("/api/tasks/long").json()
        assert (record["progress"], record["progress_message"]) == (0.25, "1 of 4 files")
        with feed(server, queue, query=position) as stream:
            (sent,) = [b for b in stream.rows_until_quiet() if b.is_row]
        assert sent.event == "progress"
        assert {k: sent.body[k] for k in ("type", "task", "state", "token", "progress",
                                          "message")} == {
            "type": "progress", "task": "long", "state": "running", "token": first,
            "progress": "250", "message": "1 of 4 files"}

        # Leased again, the task shows none until its new run says.
        wait_past(0.05)
        queue.reap(backoff_base=0.001, backoff_max=0.001)
        wait_past(0.01)
        queue.promote()
        _, second = lease_one(queue)
        (row,) = http.get("/api/snapshot").json()["leased"]
        assert (row["token"], row["progress"], row["progress_message"]) == (second, None, "")
        assert http.get("/api/tasks/long").json()["progress"] is None
        assert queue.progress("long", second, 1.0)
        (row,) = http.get("/api/snapshot").json()["leased"]
        assert (row["progress"], row["progress_message"]) == (1.0, "")


METRICS = (
    "taskq_tasks", "taskq_completions_total", "taskq_failures_total", "taskq_retries_total",
    "taskq_reaps_total", "taskq_dead_total", "taskq_enqueued_total", "taskq_cancelled_total",
    "taskq_feed_clients", "taskq_feed_deliveries_total",
)


def test_metrics_has_the_documented_names_and_counts(server: Server, queue: Broker) -> None:
    fill(queue)
    with feed(server, queue) as stream:
        stream.rows_until_quiet()
        text = httpx.get(f"{server.url}/metrics", timeout=TIMEOUT).text
        clients = metric(server, "taskq_feed_clients", queue)
    for name in METRICS:
        assert f"# TYPE {name} " in text, name
    assert f'taskq_tasks{{queue="{queue.queue}",structure="ready"}} 2' in text
    assert f'taskq_tasks{{queue="{queue.queue}",structure="dead"}} 1' in text
    assert metric(server, "taskq_enqueued_total", queue) == 5
    assert metric(server, "taskq_dead_total", queue) == 1
    assert clients == 1
    delivered = metric(server, "taskq_feed_deliveries_total", queue)
    assert delivered is not None and delivered >= 8


def test_each_lifetime_counter_in_metrics_adds_up_its_own_events(
    server: Server, queue: Broker
) -> None:
    """Each event counter a different power of two, so a metric that shows another's
    total, or leaves out or adds one of its events, shows a different number."""
    raw = ["enqueued:pending", "enqueued:delayed", "enqueued:waiting", "completed:completed",
           "failed:delayed", "failed:dead", "failed:cancelled", "reaped:delayed",
           "reaped:dead", "reaped:cancelled", "cancelled:cancelled", "released:cancelled"]
    queue.client.hset(queue.keys.stats, mapping={k: 2**i for i, k in enumerate(raw)})
    shown = {name: metric(server, name, queue) for name in METRICS[1:8]}
    assert shown == {
        "taskq_completions_total": 8,
        "taskq_failures_total": 16 + 32 + 64,
        "taskq_retries_total": 16 + 128,
        "taskq_reaps_total": 128 + 256 + 512,
        "taskq_dead_total": 32 + 256,
        "taskq_enqueued_total": 1 + 2 + 4,
        "taskq_cancelled_total": 1024 + 64 + 2048 + 512,
    }


# -- the Host check (DNS rebinding) --------------------------------------------------


def test_only_loopback_names_are_served_by_default(server: Server, queue: Broker) -> None:
    enqueue(queue, 1)
    port = server.port
    with httpx.Client(base_url=server.url, timeout=TIMEOUT,
                      params={"queue": queue.queue}) as http:
        for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "LOCALHOST"):
            assert http.get("/api/snapshot", headers={"host": host}).status_code == 200, host
        for host in (f"attacker.example:{port}", "attacker.example", f"127.0.0.1.nip.io:{port}",
                     "localhost.attacker.example", "", f"[::2]:{port}",
                     # Loopback names with something else where the port goes.
                     "[::1", "[::1]x", "localhost:x", f"127.0.0.1:{port}@attacker.example"):
            for method, path in (("GET", "/api/snapshot"), ("GET", "/"), ("GET", "/events"),
                                 ("POST", "/api/dlq/x/retry"), ("POST", "/api/tasks/x/cancel"),
                                 ("GET", "/metrics")):
                response = http.request(method, path, headers={
                    "host": host, "x-taskq-request": "1", "origin": f"http://{host}"})
                assert response.status_code == 421, (host, path)
                assert "TASKQ_ALLOWED_HOSTS" in response.json()["error"]
        assert http.get("/healthz", headers={"host": "prober.internal"}).status_code == 200


def test_allowed_hosts_come_from_the_environment_and_the_option(
    redis_server: EmbeddedRedis, tmp_path: Path
) -> None:
    env = server_env(redis_server, tmp_path, TASKQ_ALLOWED_HOSTS="dash.example.com, Proxy.Example")
    serve = Server(env, tmp_path / "serve.log", "--allowed-host", "other.example").start()
    try:
        with httpx.Client(base_url=serve.url, timeout=TIMEOUT) as http:
            for host in ("dash.example.com", "proxy.example:443", "other.example:8080"):
                assert http.get("/api/queues", headers={"host": host}).status_code == 200, host
            assert http.get("/api/queues", headers={"host": "evil.example"}).status_code == 421
    finally:
        serve.stop()


def test_a_bad_allowed_host_is_refused_at_start(
    redis_server: EmbeddedRedis, tmp_path: Path
) -> None:
    env = server_env(redis_server, tmp_path)
    argv = taskq_command("serve", "--port", str(free_port()), "--allowed-host", "a b/c")
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done
    assert "--allowed-host: 'a b/c' is not a host name" in done.stderr



def test_any_host_is_refused_at_start_without_a_token(
    redis_server: EmbeddedRedis, tmp_path: Path
) -> None:
    """With no token, the Host check is all that keeps a rebound page from the API."""
    env = server_env(redis_server, tmp_path, TASKQ_ALLOWED_HOSTS="dash.example.com, *")
    argv = taskq_command("serve", "--port", str(free_port()))
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done
    assert "refusing TASKQ_ALLOWED_HOSTS / --allowed-host '*' without TASKQ_API_TOKEN" \
        in done.stderr


def test_any_host_is_served_with_a_token(redis_server: EmbeddedRedis, tmp_path: Path) -> None:
    env = server_env(redis_server, tmp_path, TASKQ_API_TOKEN=TOKEN)
    serve = Server(env, tmp_path / "serve.log", "--allowed-host", "*").start()
    try:
        with httpx.Client(base_url=serve.url, timeout=TIMEOUT) as http:
            auth = {"authorization": f"Bearer {TOKEN}", "host": "rebound.example"}
            assert http.get("/api/queues", headers=auth).status_code == 200
            assert http.get("/api/queues", headers={"host": "rebound.example"}).status_code == 401
    finally:
        serve.stop()

# -- methods and security headers ----------------------------------------------------


def test_the_feed_is_get_only(server: Server, queue: Broker) -> None:
    with httpx.Client(base_url=server.url, timeout=httpx.Timeout(5.0)) as http:
        for method in ("HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE"):
            response = http.request(method, "/events", params={"queue": queue.queue},
                                    headers={"x-taskq-request": "1"})
            assert response.status_code == 405, (method, response.text)
            assert response.headers["allow"] == "GET"
            assert "text/event-stream" not in response.headers.get("content-type", "")


SECURITY_HEADERS = {
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}


def test_every_response_carries_the_security_headers(
    server: Server, secured: Server, queue: Broker
) -> None:
    responses = []
    with httpx.Client(base_url=server.url, timeout=TIMEOUT) as http:
        for path in ("/", "/static/app.js", "/api/queues", "/healthz", "/metrics", "/nope"):
            responses.append(http.get(path))
        responses.append(http.get("/api/snapshot", headers={"host": "evil.example"}))
    with httpx.Client(base_url=secured.url, timeout=TIMEOUT) as http:
        responses.append(http.get("/api/queues"))  # 401
    with feed(server, queue) as stream:
        responses.append(stream.response)
    for response in responses:
        for name, value in SECURITY_HEADERS.items():
            assert response.headers.get(name) == value, (response.url, name)
        csp = response.headers.get("content-security-policy", "")
        assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp, response.url


def test_no_answer_but_the_pages_own_files_may_be_stored(
    server: Server, secured: Server, queue: Broker
) -> None:
    # The API's answers hold task payloads and results: a shared proxy or the browser's
    # disk cache must not keep them (nor a refused token's 401).
    answers = []
    with httpx.Client(base_url=server.url, timeout=TIMEOUT) as http:
        for path in ("/", "/api/queues", "/api/snapshot", "/api/dlq", "/api/history",
                     "/healthz", "/metrics", "/nope"):
            answers.append(http.get(path, params={"queue": queue.queue}))
        answers.append(http.get("/api/snapshot", headers={"host": "evil.example"}))
        stored = http.get("/static/app.js")
    with httpx.Client(base_url=secured.url, timeout=TIMEOUT) as http:
        answers.append(http.get("/api/queues"))  # 401
    for answer in answers:
        assert answer.headers.get("cache-control") == "no-store", (answer.url, answer.status_code)
    assert stored.status_code == 200
    assert "no-store" not in stored.headers.get("cache-control", "")


@contextlib.contextmanager
def past_one_batch(client: redis.Redis, queue: Broker
                   ) -> Iterator[tuple[list[str], dict[str, int]]]:
    """1,200 queues in the registry while the block runs, those on each side of the
    edges of READ_AT_ONCE's batches holding 1 to 4 ready tasks: (names, those counts)."""
    names = [f"{queue.queue}-t{i:04d}" for i in range(1200)]
    filled = {names[0]: 1, names[499]: 2, names[500]: 3, names[1199]: 4}
    client.sadd(QUEUES_KEY, *names)
    try:
        for name, n in filled.items():
            for i in range(n):
                Broker(client, name).enqueue(f"t{i}")
        yield names, filled
    finally:
        client.srem(QUEUES_KEY, *names)


def test_metrics_of_queues_past_one_batch_gives_each_its_own_counts_and_totals(
    server: Server, queue: Broker, client: redis.Redis
) -> None:
    """Read READ_AT_ONCE queues a round trip: each of 1,200 keeps its own figures,
    across the batches' edges."""
    with past_one_batch(client, queue) as (names, filled):
        text = httpx.get(f"{server.url}/metrics", timeout=TIMEOUT).text
    for name in names:
        n = filled.get(name, 0)
        assert f'taskq_tasks{{queue="{name}",structure="ready"}} {n}' in text, name
        assert f'taskq_enqueued_total{{queue="{name}"}} {n}' in text, name


def test_api_queues_past_one_batch_gives_each_its_own_counts(
    server: Server, queue: Broker, client: redis.Redis
) -> None:
    """As /metrics, READ_AT_ONCE queues a round trip rather than one: each of 1,200
    keeps its own counts across the batches' edges."""
    with past_one_batch(client, queue) as (names, filled):
        reply = httpx.get(f"{server.url}/api/queues", timeout=TIMEOUT).json()
    ready = {q["name"]: q["ready"] for q in reply["queues"]}
    assert all(ready[name] == filled.get(name, 0) for name in names)
