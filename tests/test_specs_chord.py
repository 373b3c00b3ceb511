"""Chord, the fan-in of issue 20 modelled before its code: its figures, and the shortest
trace that catches each mutant (a stale ack counted; the callback enqueued in a step
after the ack)."""

from __future__ import annotations

from typing import Any

from specs.tlacheck import Result

from spec_runs import result


def actions(found: Result[Any]) -> list[str | None]:
    assert found.violation is not None
    return [step.action for step in found.violation.trace][1:]


class TestChord:
    def test_the_callback_is_enqueued_once_after_every_member_in_all_381_states(
        self,
    ) -> None:
        found = result("Chord.tla", "Chord.cfg")
        assert found.ok
        assert (found.distinct, found.generated, found.depth, found.queued) == (
            381, 1361, 13, 0)

    def test_a_stale_ack_counted_fires_the_callback_before_a_member_has_ended(self) -> None:
        found = result("ChordAnyAck.tla", "ChordAnyAck.cfg")
        assert found.violation is not None and found.violation.name == "CallbackAfterAll"
        steps = actions(found)
        assert steps[-1] is not None and steps[-1].startswith("AnyAckStale")
        assert any(a is not None and a.startswith("Expire") for a in steps)
        last = found.violation.trace[-1].state
        assert last.callback == 1 and last.state[2] == "pending"  # reaped, to run again

    def test_a_crash_between_the_ack_and_a_separate_enqueue_loses_the_callback(
        self,
    ) -> None:
        found = result("ChordSeparateStep.tla", "ChordSeparateStep.cfg")
        assert found.violation is not None and found.violation.name == "CallbackNotLost"
        assert actions(found) == ["Lease(w=1,m=1)", "Lease(w=2,m=2)", "SeparateAck(w=1)",
                                  "SeparateAck(w=2)", "Crash(w=2)"]
        last = found.violation.trace[-1].state
        assert last.callback == 0 and set(last.state.values()) == {"completed"}
