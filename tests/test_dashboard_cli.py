"""`taskq dashboard --once` in-process: each queue's lifetime totals and recent rates under
its counts, its live workers, its concurrency limits, and each sharded queue's shards."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from cli_support import CONFIG_VARIABLES, command_env
from taskq import registry
from taskq.broker import Broker, NewTask
from taskq.cli import main
from taskq.concurrency import ConcurrencyLimit
from taskq.rates import RateLimit
from taskq.settings import Settings
from taskq.shards import Layout, register, slot_of
from taskq.tools.embedded import EmbeddedRedis
from waiting import wait_until


@pytest.fixture(autouse=True)
def env(settings: Settings, client: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """Point the command at the test Redis."""
    for variable in CONFIG_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("REDIS_URL", settings.redis_url)


def test_once_shows_the_lifetime_totals_with_the_cancelled_tasks(
    queue: Broker, capsys: pytest.CaptureFixture[str]
) -> None:
    queue.enqueue("done")
    leased = queue.lease("w", 30)
    assert leased is not None and queue.ack(*leased)
    queue.enqueue("doomed", max_retries=0)
    leased = queue.lease("w", 30)
    assert leased is not None and queue.fail(*leased, error="it broke").status == "dead"
    for task_id in ("later", "sooner"):
        queue.enqueue(task_id, delay=3600)
        assert queue.cancel(task_id).outcome == "cancelled"
    queue.enqueue("running")
    leased = queue.lease("w", 30)
    assert leased is not None and queue.cancel("running").outcome == "requested"
    assert main(["dashboard", "--once", "--queue", queue.queue]) == 0
    out = capsys.readouterr().out
    assert f"queue {queue.queue}   ready 0   leased 1   delayed 0   dead 1" in out
    # A requested cancel counts once its task has ended.
    assert "\n  lifetime  enqueued 5   completed 1   failed 1   dead 1   cancelled 2\n" in out

    assert queue.ack_cancelled("running", leased[1])
    assert main(["dashboard", "--once", "--queue", queue.queue]) == 0
    assert "   cancelled 3\n" in capsys.readouterr().out


def test_a_queue_whose_keys_cannot_be_read_is_said_so_and_hides_no_other(
    client: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    """One queue's totals of another type (written by hand) ended the whole frame,
    exit 2, with an error that named no queue."""
    damaged, fine = Broker(client, "damaged"), Broker(client, "fine")
    damaged.enqueue("d1")
    fine.enqueue("f1")
    client.delete(damaged.keys.stats)
    client.set(damaged.keys.stats, "not taskq's")
    assert main(["dashboard", "--once"]) == 0
    out = capsys.readouterr().out
    assert "queue fine   ready 1" in out
    assert "queue damaged: cannot be read: Redis could not read the queue's totals: " in out


def sharded(client: redis.Redis, queue: str) -> tuple[Layout, list[Broker]]:
    """`queue` made a sharded queue of 3 shards, and a broker on each."""
    layout = Layout.of(queue, 3)
    register(client, layout)
    return layout, [Broker(client, name) for name in layout.shards]


def test_a_shard_whose_keys_cannot_be_read_is_said_so_and_hides_no_other(
    client: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    """One shard's ready list of another type ended the frame of every queue, exit 2."""
    layout, shards = sharded(client, "parcels")
    shards[0].enqueue("a")
    client.set(shards[2].keys.ready, "not taskq's")
    Broker(client, "plain").enqueue("one")
    assert main(["dashboard", "--once"]) == 0
    out = capsys.readouterr().out
    assert "queue plain   ready 1" in out
    assert re.search(rf"    {re.escape(layout.shards[0])} +\d+ +1 ", out), out
    assert re.search(rf"    {re.escape(layout.shards[2])} +\d+  cannot be read: Redis "
                     "could not read the queue's state: ", out), out


def test_once_shows_each_concurrency_limits_runs_and_waiting_tasks(
    queue: Broker, capsys: pytest.CaptureFixture[str]
) -> None:
    queue.concurrency_limits = (ConcurrencyLimit("jobs.export", 2),)
    queue.enqueue_many([NewTask(f"e{i}", name="jobs.export") for i in range(5)])
    assert len(queue.lease_many("w", 30, 10).tasks) == 2
    assert main(["dashboard", "--once", "--queue", queue.queue]) == 0
    out = capsys.readouterr().out
    # The three parked tasks are pending: counted as ready.
    assert f"queue {queue.queue}   ready 3   leased 2" in out
    assert "\n  concurrency limits                running    waiting for a slot\n" in out
    assert "\n    jobs.export                         2 / 2     3\n" in out


def test_once_shows_as_many_limits_as_rows_and_says_how_many_more(
    queue: Broker, capsys: pytest.CaptureFixture[str]
) -> None:
    queue.concurrency_limits = (ConcurrencyLimit("jobs.export", 1, "account"),)
    queue.enqueue_many([NewTask(f"e{i}", name="jobs.export", limit_key=f"acct-{i}")
                        for i in range(5)])
    assert len(queue.lease_many("w", 30, 10).tasks) == 5
    assert main(["dashboard", "--once", "--queue", queue.queue, "--rows", "2"]) == 0
    out = capsys.readouterr().out
    assert "\n    jobs.export (acct-1)                1 / 1     0\n" in out
    assert "acct-2" not in out
    assert "\n    ... and 3 more\n" in out


def test_once_says_which_delayed_tasks_wait_for_their_rate_limit(
    queue: Broker, capsys: pytest.CaptureFixture[str]
) -> None:
    """They read as any delayed task: retries 0, nothing said (the web page shows a
    badge)."""
    queue.rate_limits = (RateLimit("jobs.slow", 1 / 3600),)
    queue.enqueue_many([NewTask(f"s{i}", name="jobs.slow") for i in range(2)])
    queue.enqueue("later", delay=3600)
    assert len(queue.lease_many("w", 30, 10).tasks) == 1
    assert main(["dashboard", "--once", "--queue", queue.queue]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert next(ln for ln in lines if "s1 " in ln).endswith("   0   waits for its rate limit")
    assert next(ln for ln in lines if "later " in ln).endswith("s   0")


def test_once_keeps_a_limit_key_with_control_characters_in_its_column(
    queue: Broker, capsys: pytest.CaptureFixture[str]
) -> None:
    queue.concurrency_limits = (ConcurrencyLimit("jobs.export", 1, "account"),)
    queue.enqueue_many([NewTask("e1", name="jobs.export", limit_key="a\x1b[2J\x07")])
    assert len(queue.lease_many("w", 30, 10).tasks) == 1
    assert main(["dashboard", "--once", "--queue", queue.queue]) == 0
    out = capsys.readouterr().out
    shown = "jobs.export (a\\x1b[2J\\x07)"  # its escapes, 26 characters of its 32
    assert f"\n    {shown}{' ' * 6}    1 / 1     0\n" in out


def test_once_shows_each_shards_counts_on_a_line_under_its_sharded_queue(
    client: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    layout, shards = sharded(client, "mail")
    for i, shard in enumerate(shards):
        shard.enqueue_many([NewTask(f"t{i}-{n}") for n in range(i + 1)])
    shards[1].enqueue("later", delay=3600)
    assert shards[2].lease("w", 30) is not None
    Broker(client, "plain").enqueue("one")
    section = "\n".join([
        "sharded queue mail   3 shards   ready 5   leased 1   delayed 1   dead 0",
        "  shard                                slot    ready   leased  delayed     dead",
        *(f"    {name:32}  {slot_of(name):>5}  {ready:>7}  {leased:>7}  {delayed:>7}        0"
          for name, ready, leased, delayed in zip(layout.shards, (1, 2, 2), (0, 0, 1), (0, 1, 0),
                                                  strict=True)),
    ])

    assert main(["dashboard", "--once"]) == 0
    out = capsys.readouterr().out
    assert out.endswith(f"\n{section}\n"), out
    assert "queue plain   ready 1" in out and f"queue {layout.shards[1]}   ready 2" in out

    # A shard's own view ends with its sharded queue's; the sharded queue's name, which
    # holds no tasks itself, shows its shards alone.
    assert main(["dashboard", "--once", "--queue", layout.shards[0]]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"queue {layout.shards[0]}   ready 1") and out.endswith(f"\n{section}\n")
    assert main(["dashboard", "--once", "--queue", "mail"]) == 0
    assert capsys.readouterr().out == f"{section}\n"
    assert main(["dashboard", "--once", "--queue", "plain"]) == 0
    assert "sharded queue" not in capsys.readouterr().out


def test_once_shows_the_last_minutes_rates_under_the_lifetime_totals(
    queue: Broker, capsys: pytest.CaptureFixture[str]
) -> None:
    queue.enqueue_many([NewTask(f"ok-{i}") for i in range(3)] + [NewTask("bad")])
    for _ in range(4):
        leased = queue.lease("w", 30)
        assert leased is not None
        if leased[0] == "bad":
            assert queue.fail(*leased, error="it broke").status == "retry"
        else:
            assert queue.ack(*leased)
    assert main(["dashboard", "--once", "--queue", queue.queue]) == 0
    out = capsys.readouterr().out
    assert "\n  lifetime  enqueued 4   completed 3   failed 1   dead 0   cancelled 0\n" \
        "  rate      completed 3.0/min   failed 1.0/min   over the last 1 min\n" in out


def test_once_shows_each_live_worker_on_a_line_under_its_queue(
    queue: Broker, capsys: pytest.CaptureFixture[str]
) -> None:
    kept = registry.Presence(worker_id="box-42-0a1b2c3d", host="box", pid=42,
                             queues=(queue.queue, "other"), concurrency=8,
                             tasks=("shop.charge", "shop.send_welcome"), version="0.1.0")
    started = registry.register(queue, kept, in_hand=3, ttl=30)
    wait_until(lambda: queue.server_time_ms() > started, 1)
    # Started later, its record expires first: the registry lists it first.
    gone = dataclasses.replace(kept, worker_id="aaa-7-ffffffff", pid=7, queues=(queue.queue,))
    registry.register(queue, gone, in_hand=0, ttl=0.2)
    assert main(["dashboard", "--once", "--queue", queue.queue]) == 0
    out = capsys.readouterr().out
    header = ("\n  workers                             host                    pid  slots    up"
              "        last beat\n")
    assert header in out and out.index(header) > out.index("\n  rate      ")
    age = r"[\d.]+ m?s"
    assert re.search(rf"\n    box-42-0a1b2c3d                   box                      42  3/8 "
                     rf"     {age} +{age} ago +tasks shop\.charge, shop\.send_welcome   "
                     r"also on other\n", out), out
    assert re.search(rf"\n    aaa-7-ffffffff                    box                       7  0/8 "
                     rf"     {age} +{age} ago +tasks shop\.charge, shop\.send_welcome\n", out), out
    assert out.index("box-42-0a1b2c3d") < out.index("aaa-7-ffffffff"), "in the order they started"

    # A worker that stopped beating is gone within its lease; with none left, it says so.
    wait_until(lambda: len(registry.read_workers(queue)[1]) == 1, 5)
    assert registry.unregister(queue, kept.worker_id)
    assert main(["dashboard", "--once", "--queue", queue.queue]) == 0
    out = capsys.readouterr().out
    assert "\n  workers   none live\n" in out and "box-42" not in out


# Holds Redis for a second: every other client meanwhile is answered BUSY.
BUSY_FOR_A_SECOND = """
local t = redis.call('TIME')
while true do
  local n = redis.call('TIME')
  if (n[1] - t[1]) * 1000000 + (n[2] - t[2]) >= 1000000 then return 1 end
end"""


def test_a_live_view_goes_on_through_a_redis_busy_with_a_long_script(
        tmp_path: Path) -> None:
    """Once it has shown a frame, a Redis refusing for a while ends no watch: a frame it
    does not answer says so, and the frames go on after it."""
    with EmbeddedRedis(data_dir=tmp_path) as server, \
            redis.Redis(unix_socket_path=str(server.socket_path)) as admin:
        admin.config_set("lua-time-limit", 100)  # BUSY after 0.1 s of a script
        Broker(admin, "watched").register_queue()
        watch = subprocess.Popen(
            [sys.executable, "-m", "taskq", "dashboard", "--queue", "watched", "--interval",
             "0.1"], env=command_env(REDIS_URL=server.url), text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            assert watch.stdout is not None
            assert watch.stdout.readline().startswith("queue watched ")
            admin.eval(BUSY_FOR_A_SECOND, 0)
            time.sleep(0.5)
            assert watch.poll() is None, watch.communicate()
        finally:
            watch.terminate()
            out, err = watch.communicate(timeout=10)
    assert "BUSY Redis is busy running a script" in err
    assert err.rstrip().endswith("; the next frame tries again"), err
    assert "Traceback" not in err
    assert out.count("queue watched ") > 1
