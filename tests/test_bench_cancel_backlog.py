"""`python -m bench.cancel_backlog`: each figure is the time of a cancel that ended what
it was sent to end, or the run fails."""

from __future__ import annotations

import pytest
from bench import cancel_backlog
from bench.harness import BenchError

from taskq.flow_handle import WorkflowHandle
from taskq.flows import FlowCancellation


def test_a_small_backlog_times_each_cancel_that_ended_its_steps(
    capsys: pytest.CaptureFixture[str],
) -> None:
    cancel_backlog.main(200, 50, 300)
    out = capsys.readouterr().out
    assert "1,000 pending steps: cancel cancelled, 1,000 ended" in out
    assert "the oldest waiting task: cancel cancelled" in out
    assert ("a workflow of 50 pending steps with 300 tasks pushed after it: cancel "
            "cancelled, 50 ended") in out


def test_a_cancel_that_ended_nothing_fails_the_run_rather_than_timing_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def missed(handle: WorkflowHandle) -> FlowCancellation:
        return handle.flows.cancel(handle.flow_id + "-elsewhere")

    monkeypatch.setattr(WorkflowHandle, "cancel", missed)
    with pytest.raises(BenchError, match="was unknown and ended 0"):
        cancel_backlog.main(200)
