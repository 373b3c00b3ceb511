"""`taskq schedules`: an app's periodic schedules with their next and last ticks."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import redis

from cli_support import CONFIG_VARIABLES
from helpers import this_hours_tick
from taskq.broker import Broker
from taskq.cli import main
from taskq.schedules import make_schedule
from taskq.settings import Settings
from taskq.shards import Layout, register
from taskq.terminal import utc_time

SCHEDULED_APP = '''
from datetime import timedelta
import taskq

app = taskq.App()

@app.periodic(cron="0 9 * * 1-5", tz="Europe/Paris", name="weekday-report")
@app.task("report")
def report() -> None:
    pass

@app.periodic(every=timedelta(minutes=5), policy="all")
@app.task("tidy")
def tidy() -> None:
    pass
'''


@pytest.fixture
def app_module(tmp_path: Path, settings: Settings, client: redis.Redis,
               monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    for variable in CONFIG_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("REDIS_URL", settings.redis_url)
    (tmp_path / "scheduled_app.py").write_text(SCHEDULED_APP)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "scheduled_app:app"
    sys.modules.pop("scheduled_app", None)


def test_schedules_lists_each_with_its_next_tick_and_never_fired(
    app_module: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["schedules", "--app", app_module]) == 0
    out = capsys.readouterr().out
    assert "2 schedule(s) on queue 'default'" in out
    assert "weekday-report  report  cron '0 9 * * 1-5' (Europe/Paris)  policy=latest" in out
    assert "tidy  tidy  every 0:05:00  policy=all" in out
    assert out.count("never fired") == 2


def test_schedules_shows_the_last_tick_a_worker_fired(
    app_module: str, client: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    client.hset(Broker(client, "default").keys.schedules, "last:tidy", 1_700_000_100_000)
    assert main(["schedules", "--app", app_module]) == 0
    out = capsys.readouterr().out
    assert "last tick 2023-11-14 22:15:00Z" in out
    assert out.count("never fired") == 1
    # Fired with no version kept (written by hand): not this app's definition, of
    # whichever deploy, the CLI's checkout being older or newer than the workers'.
    assert "the definition workers last fired differs from this app's (an older or a " \
        "newer deploy)" in out


def test_schedules_needs_an_app(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schedules"]) == 2
    assert "--app is required (or --forget NAME)" in capsys.readouterr().err


def fired(client: redis.Redis, name: str, last_tick: Callable[[int], int]) -> Broker:
    """Schedule `name` (every hour, on the hour) fired on 'default', its last tick
    `last_tick(now)` by the Redis clock."""
    broker = Broker(client, "default")
    broker.fire(make_schedule(name=name, task="jobs.tidy", cron=None, every=timedelta(hours=1),
                              tz=None, args=(), kwargs={}, policy="all",
                              grace=timedelta(minutes=1), max_retries=3))
    client.hset(broker.keys.schedules, f"last:{name}", last_tick(broker.server_time_ms()))
    return broker


def test_forget_takes_out_a_schedule_whose_tick_is_long_overdue(
    app_module: str, client: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    broker = fired(client, "old", lambda now: now - 7_300_000)
    assert main(["schedules", "--forget", "old"]) == 0
    assert "queue 'default': schedule 'old' forgotten" in capsys.readouterr().out
    assert broker.schedule_state("old") is None
    assert client.hgetall(broker.keys.schedules) == {}


def test_forget_keeps_a_schedule_a_worker_may_still_fire_unless_forced(
    app_module: str, client: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    broker = fired(client, "recent", this_hours_tick)
    assert main(["schedules", "--forget", "recent"]) == 1
    out = capsys.readouterr().out
    assert "schedule 'recent' kept: its next tick is due in" in out and "--force" not in out
    assert broker.schedule_state("recent") is not None
    assert main(["schedules", "--forget", "recent", "--force"]) == 0
    assert broker.schedule_state("recent") is None


def test_forget_of_an_unknown_or_bad_name_says_so(
    app_module: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["schedules", "--forget", "nope"]) == 1
    assert "no schedule 'nope' on this queue" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["schedules", "--forget", "a b"])
    assert "invalid schedule name 'a b'" in capsys.readouterr().err
    assert main(["schedules", "--app", app_module, "--force"]) == 2
    assert "--force goes with --forget NAME" in capsys.readouterr().err


@pytest.mark.parametrize(("stored", "said"), [
    ("1.5e12", "never fired"), ("garbage", "never fired"),
    ("99999999999999999999", "last tick 99999999999999999999 ms (past the years a date holds)"),
])  # fmt: skip
def test_a_last_tick_written_by_hand_is_shown_not_a_traceback(
    app_module: str, client: redis.Redis, capsys: pytest.CaptureFixture[str], stored: str,
    said: str
) -> None:
    client.hset(Broker(client, "default").keys.schedules, "last:tidy", stored)
    assert main(["schedules", "--app", app_module]) == 0
    out = capsys.readouterr().out
    assert said in out and out.count("tidy  tidy") == 1


def test_schedules_shows_a_tick_no_worker_fired_as_overdue_not_a_later_one(
    app_module: str, client: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    """Workers down for three hours owe the tick after the last they fired: the one after
    now would read as if they were up."""
    broker = Broker(client, "default")
    last = broker.server_time_ms() // 300_000 * 300_000 - 3 * 3_600_000
    client.hset(broker.keys.schedules, "last:tidy", last)
    assert main(["schedules", "--app", app_module]) == 0
    out = capsys.readouterr().out
    assert f"next tick {utc_time(last + 300_000)} (overdue by 2:5" in out
    assert out.count("overdue") == 1


def test_schedules_of_a_sharded_queue_are_read_and_forgotten_by_the_queues_name(
    app_module: str, client: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    """A sharded queue's schedules fire on one shard, which the operator need not know."""
    layout = Layout.of("mail", 3)
    register(client, layout)
    fires_on = Broker(client, layout.shards[0])
    fires_on.fire(make_schedule(name="tidy", task="tidy", cron=None,
                                every=timedelta(minutes=5), tz=None, args=(), kwargs={},
                                policy="all", grace=timedelta(minutes=1), max_retries=3))
    assert main(["schedules", "--app", app_module, "--queue", "mail"]) == 0
    out = capsys.readouterr().out
    assert f"2 schedule(s) on queue {layout.shards[0]!r}" in out
    assert out.count("never fired") == 1
    assert main(["schedules", "--forget", "tidy", "--queue", "mail", "--force"]) == 0
    assert f"queue {layout.shards[0]!r}: schedule 'tidy' forgotten" in capsys.readouterr().out
    assert fires_on.schedule_state("tidy") is None
