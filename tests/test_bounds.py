"""Hostile arguments, drawn by Hypothesis, for every public Broker method and every
setting: each call works or raises a taskq error, and a refused call leaves every key
of the database exactly as it was."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import redis
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from helpers import dump
from taskq import limits
from taskq.broker import Broker, NewTask
from taskq.errors import ConfigError, TaskqError
from taskq.schedules import make_schedule
from taskq.settings import ENVIRONMENT, Settings

SURROGATES = st.builds(lambda a, s, b: a + s + b, st.text(max_size=4),
                       st.sampled_from(["\ud800", "\udfff", "\udc80"]), st.text(max_size=4))
NUMBER_TEXT = st.sampled_from(["5", "1e20", "nan", "-1", "", " ", "0x10", "10" * 30])
# Every kind of value a caller could pass by mistake, whatever the argument wants.
HOSTILE = st.one_of(
    st.none(), st.booleans(), st.integers(),
    st.sampled_from([-1, 0, 2**31, 2**53 + 1, 2**63, 2**64, 10**20, 10**400]),
    st.floats(), st.sampled_from([1e14, 1e16, 1e20, 1e308, -1e-9, 5e-324]),
    st.text(max_size=20), SURROGATES, st.binary(max_size=8), NUMBER_TEXT,
    st.lists(st.integers(), max_size=2), st.tuples(st.text(max_size=3)),
)
TASK_IDS = st.sampled_from(["ready", "held", "dead", "due", "expired", "missing"])


def arg(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Sometimes a good value, so calls also work; often a hostile one."""
    return st.one_of(good, HOSTILE)


TASK_ID = arg(TASK_IDS)
TOKEN = arg(st.integers(0, 3))
SECONDS = arg(st.one_of(st.integers(0, 100), st.floats(0, 100)))
COUNT = arg(st.integers(1, 5))
TEXT = arg(st.text(max_size=20))
PAYLOAD = arg(st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5) |
                              SURROGATES, max_size=3))
HELD = arg(st.lists(st.tuples(TASK_IDS, st.integers(0, 3)) | HOSTILE, max_size=3))

PROPERTY = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


def scene(broker: Broker) -> None:
    """A queue where every operation has something to change: a ready task, one held
    (token 1), one dead, a delayed task that falls due and a lease that expires at once."""
    broker.client.flushall()
    for task_id in ("expired", "dead", "held", "ready"):
        broker.enqueue(task_id, max_retries=0, payload={"n": 1}, idempotency_key=task_id)
    broker.enqueue("due", delay=0.001)
    broker.lease("w0", 0.001)
    broker.fail("dead", broker.lease("w0", 10)[1], "boom")  # type: ignore[index]
    broker.lease("w0", 10)
    time.sleep(0.003)  # past both 1 ms timers, so nothing expires between dump and call


def works_or_refuses(broker: Broker, call: Callable[[], object]) -> None:
    scene(broker)
    before = dump(broker.client)
    try:
        call()
    except TaskqError:
        assert dump(broker.client) == before
        return


@PROPERTY
@given(task_id=TASK_ID, delay=SECONDS, max_retries=arg(st.integers(0, 5)), payload=PAYLOAD,
       idempotency_key=arg(st.none() | TASK_IDS), idempotency_ttl=arg(st.integers(1, 100)),
       name=TEXT)
@example(task_id="new", delay=0, max_retries=3, payload={"s": "\ud800"}, idempotency_key=None,
         idempotency_ttl=60, name="n")
def test_enqueue(broker: Broker, **given: Any) -> None:
    works_or_refuses(broker, lambda: broker.enqueue(**given))


@PROPERTY
@given(tasks=arg(st.lists(st.builds(NewTask, task_id=TASK_ID, delay=SECONDS,
                                    max_retries=arg(st.integers(0, 5)), payload=PAYLOAD,
                                    idempotency_key=arg(st.none()), name=TEXT) | HOSTILE,
                          max_size=3)),
       batch_size=COUNT)
def test_enqueue_many(broker: Broker, tasks: Any, batch_size: Any) -> None:
    works_or_refuses(broker, lambda: broker.enqueue_many(tasks, batch_size))


@PROPERTY
@given(worker_id=TEXT, lease_seconds=SECONDS)
def test_lease(broker: Broker, worker_id: Any, lease_seconds: Any) -> None:
    works_or_refuses(broker, lambda: broker.lease(worker_id, lease_seconds))


@PROPERTY
@given(worker_id=TEXT, lease_seconds=SECONDS, count=COUNT, request_id=arg(st.none()))
def test_lease_many(broker: Broker, **given: Any) -> None:
    works_or_refuses(broker, lambda: broker.lease_many(**given))


@PROPERTY
@given(task_id=st.one_of(TASK_IDS, HOSTILE), token=st.one_of(st.integers(0, 3), HOSTILE),
       lease_seconds=SECONDS)
@example(task_id="held", token=1, lease_seconds=10**400)
def test_heartbeat(broker: Broker, **given: Any) -> None:
    works_or_refuses(broker, lambda: broker.heartbeat(**given))


@PROPERTY
@given(held=HELD, lease_seconds=SECONDS)
def test_heartbeat_many(broker: Broker, **given: Any) -> None:
    works_or_refuses(broker, lambda: broker.heartbeat_many(**given))


def test_heartbeat_refuses_a_task_id_with_a_lone_surrogate(broker: Broker) -> None:
    works_or_refuses(broker, lambda: broker.heartbeat("held\ud800", 1, 10))


@PROPERTY
@given(task_id=TASK_ID, token=TOKEN)
def test_ack(broker: Broker, task_id: Any, token: Any) -> None:
    works_or_refuses(broker, lambda: broker.ack(task_id, token))


@PROPERTY
@given(held=HELD)
def test_ack_many(broker: Broker, held: Any) -> None:
    works_or_refuses(broker, lambda: broker.ack_many(held))


@PROPERTY
@given(held=HELD, worker_id=TEXT, lease_seconds=SECONDS, count=COUNT)
def test_ack_and_lease(broker: Broker, **given: Any) -> None:
    works_or_refuses(broker, lambda: broker.ack_and_lease(**given))


@PROPERTY
@given(task_id=TASK_ID, token=TOKEN, error=TEXT, backoff_base=SECONDS, backoff_max=SECONDS)
@example(task_id="held", token=1, error="boom", backoff_base=1e12, backoff_max=1e12)
def test_fail(broker: Broker, **given: Any) -> None:
    works_or_refuses(broker, lambda: broker.fail(**given))


@PROPERTY
@given(task_id=TASK_ID, token=TOKEN)
def test_release(broker: Broker, task_id: Any, token: Any) -> None:
    works_or_refuses(broker, lambda: broker.release(task_id, token))


@PROPERTY
@given(task_id=TASK_ID, only=arg(st.sampled_from([None, "pending", "running", "dead"])))
def test_cancel(broker: Broker, task_id: Any, only: Any) -> None:
    works_or_refuses(broker, lambda: broker.cancel(task_id, only))


@PROPERTY
@given(task_id=TASK_ID, token=TOKEN)
def test_ack_cancelled(broker: Broker, task_id: Any, token: Any) -> None:
    works_or_refuses(broker, lambda: broker.ack_cancelled(task_id, token))


@PROPERTY
@given(limit=COUNT, backoff_base=SECONDS, backoff_max=SECONDS)
@example(limit=1, backoff_base=10**400, backoff_max=1)
def test_reap(broker: Broker, **given: Any) -> None:
    works_or_refuses(broker, lambda: broker.reap(**given))


@PROPERTY
@given(limit=COUNT)
def test_promote(broker: Broker, limit: Any) -> None:
    works_or_refuses(broker, lambda: broker.promote(limit))


@PROPERTY
@given(dead_ttl=SECONDS, limit=COUNT)
@example(dead_ttl=10**400, limit=1)
def test_purge(broker: Broker, dead_ttl: Any, limit: Any) -> None:
    works_or_refuses(broker, lambda: broker.purge(dead_ttl, limit))


EVERY_SECOND = make_schedule(name="tick", task="mod.fn", cron=None, every=timedelta(seconds=1),
                             tz=None, args=(1,), kwargs={}, policy="all",
                             grace=timedelta(seconds=5), max_retries=3)
# Declared schedules, and ones built by hand past make_schedule's checks.
SCHEDULES = st.sampled_from([
    EVERY_SECOND,
    make_schedule(name="daily", task="mod.fn", cron="0 0 * * *", every=None,
                  tz="Europe/Paris", args=(), kwargs={}, policy="skip",
                  grace=timedelta(seconds=1), max_retries=0),
    dataclasses.replace(EVERY_SECOND, task="t" * 5000),
    dataclasses.replace(EVERY_SECOND, policy="sometimes"),  # type: ignore[arg-type]
    dataclasses.replace(EVERY_SECOND, max_retries=-1),
    dataclasses.replace(EVERY_SECOND, grace_ms=0),
    dataclasses.replace(EVERY_SECOND, every_ms=None),
])  # fmt: skip


@PROPERTY
@given(schedule=arg(SCHEDULES),
       ticks=arg(st.lists(st.integers(0, 2 * 10**13), max_size=3)),
       after_ms=arg(st.integers(0, 10**13)))
@example(schedule=EVERY_SECOND, ticks=[2000, 1000], after_ms=0)
def test_fire(broker: Broker, **given: Any) -> None:
    works_or_refuses(broker, lambda: broker.fire(**given))


@PROPERTY
@given(task_id=TASK_ID, read=st.sampled_from(["payload", "retry_dead", "task", "cancel"]))
def test_each_call_on_one_task_id(broker: Broker, task_id: Any, read: str) -> None:
    works_or_refuses(broker, lambda: getattr(broker, read)(task_id))


def test_calls_without_arguments(broker: Broker) -> None:
    works_or_refuses(broker, broker.dead)
    works_or_refuses(broker, broker.counts)


@PROPERTY
@given(queue=arg(st.just("test")), events_retention=COUNT, max_payload_bytes=arg(st.just(100)),
       completed_ttl=SECONDS)
def test_broker_options(client: redis.Redis, **given: Any) -> None:
    """A Broker that is made at all uses only values in range."""
    try:
        broker = Broker(client, **given)
    except TaskqError:
        return
    assert limits.EVENTS_RETENTION.holds(broker.events_retention)
    assert limits.MAX_PAYLOAD_BYTES.holds(broker.max_payload_bytes)
    assert 1 <= broker.completed_ttl_ms <= limits.COMPLETED_TTL.high * 1000


RAW = st.one_of(st.text(max_size=12), NUMBER_TEXT, SURROGATES, st.integers().map(str),
                st.floats().map(str), st.sampled_from(["1e14", "1e16", "1e400", "0", "-0",
                                                       "1_000", "٣", "true"]))


@settings(max_examples=100, deadline=None)
@given(environ=st.dictionaries(st.sampled_from([v for v, _ in ENVIRONMENT.values()]), RAW,
                               max_size=4))
@example(environ={"LEASE_SECONDS": "1e14"})
@example(environ={"TASKQ_COMPLETED_TTL_SECONDS": "1e16", "TASKQ_EVENTS_RETENTION": "10" * 10})
def test_settings_from_env(environ: dict[str, str]) -> None:
    """Settings are made with every number in its range, or refused with a ConfigError."""
    try:
        made = Settings.from_env(environ)
    except ConfigError:
        return
    for name, bound in limits.SETTINGS.items():
        assert bound.holds(getattr(made, name)), name
