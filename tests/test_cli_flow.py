"""`taskq flow show` and `taskq flow cancel`, run as the real command against a
workflow on the test Redis: each stage's steps with their states, the step that failed
it and those skipped for it, and clear errors for an id that names no workflow."""

from __future__ import annotations

import pytest

from cli_support import command_env, taskq
from helpers import lease_one
from taskq.broker import Broker
from taskq.flows import Flows, StageSpec
from taskq.results import Failure
from taskq.settings import Settings
from waiting import wait_until


def step(name: str) -> tuple[object, ...]:
    return (name, '{"args":[],"kwargs":{}}', 0, "", 5, "")


def start(queue: Broker, flow_id: str, *stages: tuple[str, ...]) -> None:
    """A workflow of `stages`, each the names of its steps (two or more: a group)."""
    assert Flows(queue).start(flow_id, [
        StageSpec(tuple(step(name) for name in names), group=len(names) > 1, policy="fail")
        for names in stages])


@pytest.fixture
def env(settings: Settings) -> dict[str, str]:
    return command_env(REDIS_URL=settings.redis_url)


def flow(queue: Broker, env: dict[str, str], *args: str) -> tuple[int, list[str], str]:
    done = taskq("flow", *args, "--queue", queue.queue, env=env)
    return done.returncode, done.stdout.splitlines(), done.stderr


def test_show_lists_each_stage_and_its_steps_states(queue: Broker, env: dict[str, str]) -> None:
    start(queue, "nightly", ("fetch",), ("parse", "parse"), ("store",))
    assert queue.ack(*lease_one(queue), "1")
    lease_one(queue)
    status, out, err = flow(queue, env, "show", "nightly")
    assert (status, err) == (0, "")
    assert out[0] == (f"workflow nightly on queue {queue.queue!r}: running, stage 2 of 3, "
                      "1 of 4 steps ended")
    assert out[1].startswith("  started 20") and "ended" not in out[1]
    assert [line.split() for line in out[2:]] == [
        ["stage", "1", "step", "nightly.1.1", "fetch", "completed", "retries", "0"],
        ["stage", "2", "group,", "fail", "nightly.2.1", "parse", "running", "retries", "0"],
        ["stage", "2", "group,", "fail", "nightly.2.2", "parse", "pending", "retries", "0"],
        ["stage", "3", "step", "nightly.3.1", "store", "waiting", "retries", "0"]]


def test_show_counts_a_step_whose_record_expired_as_ended(
    queue: Broker, env: dict[str, str]
) -> None:
    start(queue, "nightly", ("fetch",), ("parse",), ("store",))
    assert queue.ack(*lease_one(queue), "1")
    fetched = queue.keys.task("nightly.1.1")
    queue.client.pexpire(fetched, 1)  # its result TTL run out
    wait_until(lambda: not queue.client.exists(fetched), 5, "the record to expire")
    status, out, _ = flow(queue, env, "show", "nightly")
    assert status == 0
    assert out[0].endswith(": running, stage 2 of 3, 1 of 3 steps ended")
    assert out[2].split() == ["stage", "1", "step", "nightly.1.1", "expired", "retries", "0"]


def test_show_names_the_step_that_failed_the_workflow_and_the_skipped_ones(
    queue: Broker, env: dict[str, str]
) -> None:
    start(queue, "etl", ("extract",), ("load",), ("report",))
    assert queue.ack(*lease_one(queue), "1")
    assert queue.fail(*lease_one(queue), Failure("builtins.OSError", "disk full")).status \
        == "dead"
    status, out, _ = flow(queue, env, "show", "etl")
    assert status == 0
    assert out[0].endswith(": failed, stage 2 of 3, 3 of 3 steps ended")
    assert ", ended 20" in out[1]
    assert out[2] == ("  failed at etl.2.1: 1 of 1 steps of stage 2 did not complete: "
                      "etl.2.1 (dead: builtins.OSError: disk full)")
    assert out[4].split()[4:] == ["load", "dead", "(failed", "the", "workflow)", "retries",
                                  "0"]
    assert out[5].split()[4:] == ["report", "skipped", "(cancelled)", "retries", "0"]


def test_an_unknown_or_invalid_id_is_an_error_that_says_so(
    queue: Broker, env: dict[str, str]
) -> None:
    start(queue, "here", ("one",))
    status, out, err = flow(queue, env, "show", "nowhere")
    assert (status, out) == (1, [])
    assert err.strip() == (f"taskq flow: no workflow 'nowhere' on queue {queue.queue!r}: it "
                           "never started there, or it ended and its record expired (kept "
                           "TASKQ_COMPLETED_TTL_SECONDS)")
    status, out, err = flow(queue, env, "cancel", "nowhere")
    assert status == 1 and out == [f"nowhere: unknown: no workflow 'nowhere' on queue "
                                   f"{queue.queue!r}: it never started there, or it ended "
                                   "and its record expired (kept TASKQ_COMPLETED_TTL_SECONDS)"]
    for bad in ("here.1.1", "no spaces", "x" * 101):
        status, out, err = flow(queue, env, "show", bad)
        assert status == 2 and out == []
        assert err.startswith("taskq flow: invalid workflow id") and "use 1-100 letters" in err
    assert taskq("flow", env=env).returncode == 2  # no action: usage


def test_a_sharded_queue_is_refused_with_the_reason(queue: Broker, env: dict[str, str]) -> None:
    done = taskq("flow", "show", "any", env=dict(env, TASKQ_SHARDS="3"))
    assert done.returncode == 2
    assert "shards: a workflow runs in one queue" in done.stderr


def test_cancel_ends_the_waiting_steps_once(queue: Broker, env: dict[str, str]) -> None:
    start(queue, "batch", ("split",), ("work", "work", "work"), ("merge",))
    lease_one(queue)
    status, out, _ = flow(queue, env, "cancel", "batch")
    assert (status, out) == (0, ["batch: cancelled: 4 step(s) ended now; 1 running step(s) "
                                 "told to stop at their next heartbeat"])
    states = [s.state for s in Flows(queue).status("batch").steps]  # type: ignore[union-attr]
    assert states == ["running"] + ["cancelled"] * 4
    status, out, _ = flow(queue, env, "cancel", "batch")
    assert (status, out) == (0, ["batch: unchanged: it has ended (cancelled)"])
