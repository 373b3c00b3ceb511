"""Every model and mutant in specs/, the .cfg each runs under, and what must happen."""

from __future__ import annotations

from pathlib import Path

from specs.CeleryETA import celery_eta
from specs.RoostPush import roost_push, roost_push_split_attach
from specs.tlacheck.suite import Check, Expect, Figures

ROOT = Path(__file__).resolve().parent

CHECKS: tuple[Check, ...] = (
    Check(
        spec="CeleryETA/CeleryETA_faulty.tla",
        config="CeleryETA/CeleryETA.cfg",
        build=celery_eta.faulty_model,
        expect=Expect.violated("InvariantNoDoubleExecution", depth=5),
        # The seed's "53 states" is TLC's states-generated count at the violation.
        tlc=Figures("seeds/000", generated=53, depth=5),
    ),
    Check(
        spec="CeleryETA/CeleryETA_idempotent.tla",
        config="CeleryETA/CeleryETA.cfg",
        build=celery_eta.idempotent_model,
        # The seed's cfg leaves deadlock checking on, so TLC stops at the first
        # state where both tasks are acknowledged; "240 states" is from there.
        expect=Expect.deadlock(depth=7),
        tlc=Figures("seeds/000", generated=240, depth=8),
    ),
    Check(
        spec="CeleryETA/CeleryETA_idempotent.tla",
        config="CeleryETA/CeleryETA_NoDeadlock.cfg",
        build=celery_eta.idempotent_model,
        expect=Expect.holds(),
    ),
    Check(
        spec="RoostPush/RoostPush.tla",
        config="RoostPush/RoostPush.cfg",
        build=roost_push.model,
        expect=Expect.holds(),
        tlc=Figures("seeds/002", distinct=164, depth=12),
    ),
    Check(
        spec="RoostPush/RoostPushSplitAttach.tla",
        config="RoostPush/RoostPushSplitAttach.cfg",
        build=roost_push_split_attach.model,
        expect=Expect.violated("OpenStreamIsCurrent", depth=4),
    ),
    Check(
        spec="RoostPush/RoostPushSplitAttach.tla",
        config="RoostPush/RoostPushSplitAttach_NoOpenStreamCheck.cfg",
        build=roost_push_split_attach.model,
        # The seed's counterexample: 4 steps, so 5 states.
        expect=Expect.violated("NoSilentGap", depth=5),
    ),
)
