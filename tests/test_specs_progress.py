"""Progress, a running task's progress fenced by its run's token: its figures, every
action reached, and the shortest trace that catches each mutant."""

from __future__ import annotations

import re
from typing import Any

from specs.tlacheck import Result

from spec_runs import result


def actions(found: Result[Any]) -> list[str | None]:
    assert found.violation is not None
    return [step.action for step in found.violation.trace][1:]


class TestProgress:
    def test_every_check_holds_in_all_145_states(self) -> None:
        found = result("Progress.tla", "Progress.cfg")
        assert found.ok
        assert (found.distinct, found.generated, found.depth, found.queued) == (145, 297, 9, 0)

    def test_a_reaped_run_still_reporting_overwrites_the_current_ones_without_the_fence(
        self,
    ) -> None:
        found = result("ProgressNoFence.tla", "ProgressNoFence.cfg")
        assert found.violation is not None and found.violation.name == "ShownIsLast"
        assert actions(found) == ["Lease(w=1)", "Expire", "Lease(w=2)",
                                  "NoFenceReport(w=2,v=1)", "NoFenceReport(w=1,v=1)"]

    def test_without_the_token_a_task_leased_again_shows_the_last_runs_progress(
        self,
    ) -> None:
        found = result("ProgressTokenless.tla", "ProgressTokenless.cfg")
        assert found.violation is not None
        assert found.violation.name == "TokenlessNoStaleShown"
        assert [re.sub(r"\(.*", "", a or "") for a in actions(found)] == [
            "Lease", "Report", "Expire"]
