"""`taskq flow show ID` and `taskq flow cancel ID`: a workflow's stages and steps as
they stand, and cancelling it."""

from __future__ import annotations

import argparse
import sys

from taskq.app import App
from taskq.cli.common import add_queue_after_action, add_queue_argument, settings_from
from taskq.cli.task import iso
from taskq.flows import FlowCancellation, Flows, FlowStatus, StepState
from taskq.terminal import clean, on_terminal, one_line, show_table

HELP = "show a workflow's stages and steps with their states, or cancel it"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_queue_argument(parser)
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    show = actions.add_parser("show", help="the workflow's state, and each stage's steps "
                              "with their names, states and retries")
    show.add_argument("flow_id", metavar="ID", help="the workflow's id")
    add_queue_after_action(show)
    cancel = actions.add_parser("cancel", help="cancel the workflow: it starts no further "
                                "stage; waiting, pending, delayed and dead steps end now, "
                                "running ones when their workers stop them")
    cancel.add_argument("flow_id", metavar="ID", help="the workflow's id")
    add_queue_after_action(cancel)


def main(args: argparse.Namespace) -> int:
    # App.flows refuses a sharded queue with the reason: a workflow lives on one shard.
    flows = App(settings=settings_from(args)).flows()
    if args.action == "cancel":
        return cancel(flows, args.flow_id)
    status = flows.status(args.flow_id)
    if status is None:
        print(f"taskq flow: {missing(args.flow_id, flows.broker.queue)}", file=sys.stderr)
        return 1
    show(status, flows.broker.queue)
    return 0


def missing(flow_id: str, queue: str) -> str:
    return (f"no workflow {flow_id!r} on queue {queue!r}: it never started there, or it "
            "ended and its record expired (kept TASKQ_COMPLETED_TTL_SECONDS)")


def show(status: FlowStatus, queue: str) -> None:
    """The workflow's head lines, then one row per step, stage by stage."""
    title = (f"workflow {status.flow_id} on queue {queue!r}: {status.state}, stage "
             f"{status.stage} of {status.stages}, {status.steps_ended} of "
             f"{len(status.steps)} steps ended")
    head = [title, f"  started {iso(status.created_at_ms)}"
            + (f", ended {iso(status.ended_at_ms)}" if status.ended_at_ms else "")]
    if status.upstream:
        head.append(f"  failed at {status.upstream}: {clean(status.error_message)}")
    rows = [[str(s.stage), kind(status, s.stage), s.task_id, clean(s.name),
             state_of(status, s), str(s.retries)] for s in status.steps]
    plain = head + [f"  stage {row[0]}  {row[1]:<14}  {row[2]}  {row[3]}  {row[4]}  "
                    f"retries {row[5]}" for row in rows]
    if on_terminal():
        # Printed above the table rather than as its title, which rich would wrap to
        # the table's width.
        print("\n".join(one_line(line) for line in head))
    show_table("", ["stage", "kind", "step", "name", "state", "retries"], rows, plain)


def kind(status: FlowStatus, stage: int) -> str:
    """`step` for a stage of one step that hands on its result; else `group` and what
    a step of it that does not complete does."""
    if not status.groups[stage - 1]:
        return "step"
    return f"group, {status.policies[stage - 1]}"


def state_of(status: FlowStatus, step: StepState) -> str:
    """The step's state, saying which step failed the workflow and which were skipped
    for it (cancelled while they waited: they never ran)."""
    if step.task_id == status.upstream:
        return f"{step.state} (failed the workflow)"
    if status.skipped(step):
        return "skipped (cancelled)"
    return step.state or "expired"


def cancel(flows: Flows, flow_id: str) -> int:
    done = flows.cancel(flow_id)
    print(one_line(f"{flow_id}: {cancel_line(done, flows.broker.queue)}"))
    return 1 if done.outcome == "unknown" else 0


def cancel_line(done: FlowCancellation, queue: str) -> str:
    if done.outcome == "cancelled":
        told = (f"; {done.told} running step(s) told to stop at their next heartbeat"
                if done.told else "")
        return f"cancelled: {done.ended} step(s) ended now{told}"
    if done.outcome == "unchanged":
        return f"unchanged: it has ended ({done.state})"
    return f"unknown: {missing(flow_id=done.flow_id, queue=queue)}"
