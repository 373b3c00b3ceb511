"""`taskq serve`'s schedules routes over real HTTP, for a sharded queue named as a whole:
its schedules are on the shard its workers fire them on."""

from __future__ import annotations

import uuid
from datetime import timedelta

import httpx
import redis

from serve_support import TIMEOUT, Server
from taskq.broker import Broker
from taskq.schedules import make_schedule
from taskq.shards import Layout, register

WRITE = {"x-taskq-request": "1"}


def test_a_sharded_queues_schedules_are_listed_and_forgotten_by_the_queues_name(
    server: Server, client: redis.Redis
) -> None:
    layout = Layout.of(f"mail-{uuid.uuid4().hex[:8]}", 3)
    register(client, layout)
    fires_on = Broker(client, layout.shards[0])
    fires_on.fire(make_schedule(name="tidy", task="jobs.tidy", cron=None,
                                every=timedelta(hours=1), tz=None, args=(), kwargs={},
                                policy="all", grace=timedelta(minutes=1), max_retries=3))
    with httpx.Client(base_url=server.url, params={"queue": layout.queue},
                      timeout=TIMEOUT, headers=WRITE) as http:
        listed = http.get("/api/schedules").json()
        assert listed["queue"] == layout.shards[0]
        assert [s["name"] for s in listed["schedules"]] == ["tidy"]
        forgotten = http.post("/api/schedules/tidy/forget", params={"force": "1"})
        assert (forgotten.status_code, forgotten.json()["verdict"]) == (200, "forgotten")
    assert fires_on.schedule_state("tidy") is None
