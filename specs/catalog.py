"""Every model and mutant in specs/, the .cfg each runs under, and what must happen."""

from __future__ import annotations

from pathlib import Path

from specs.CeleryETA import celery_eta
from specs.RoostPush import roost_push, roost_push_split_attach
from specs.TaskFeed import task_feed, task_feed_split_attach
from specs.TaskQueue import task_queue_checks, task_queue_mutants
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
    Check(
        spec="TaskQueue/TaskQueue.tla",
        config="TaskQueue/TaskQueue.cfg",
        build=task_queue_checks.model,
        expect=Expect.holds(),
    ),
    Check(
        spec="TaskQueue/TaskQueue.tla",
        config="TaskQueue/TaskQueue_GuardNone.cfg",
        build=task_queue_checks.model,
        # Mutant (c): effect, release at shutdown, lease again, effect again.
        expect=Expect.violated("T4_EffectOnce", depth=7),
    ),
    Check(
        spec="TaskQueue/TaskQueue.tla",
        config="TaskQueue/TaskQueue_GuardFence.cfg",
        build=task_queue_checks.model,
        # Not a mutant: the fence guard, as documented, lets an older token that
        # writes first through, so it does not give T4 either.
        expect=Expect.violated("T4_EffectOnce", depth=7),
    ),
    Check(
        spec="TaskQueue/TaskQueueAckNoFence.tla",
        config="TaskQueue/TaskQueueAckNoFence.cfg",
        build=task_queue_mutants.ack_no_fence_model,
        expect=Expect.violated("T3_StaleAtOnce", depth=10),
    ),
    Check(
        spec="TaskQueue/TaskQueueAckNoFence.tla",
        config="TaskQueue/TaskQueueAckNoFence_NoStaleAtOnce.cfg",
        build=task_queue_mutants.ack_no_fence_model,
        expect=Expect.property_violated("T3_StaleChangesNothing", depth=10),
    ),
    Check(
        spec="TaskQueue/TaskQueueReapNoBump.tla",
        config="TaskQueue/TaskQueueReapNoBump.cfg",
        build=task_queue_mutants.reap_no_bump_model,
        expect=Expect.violated("T3_StaleAtOnce", depth=5),
    ),
    Check(
        spec="TaskQueue/TaskQueueReapNoBump.tla",
        config="TaskQueue/TaskQueueReapNoBump_NoStaleAtOnce.cfg",
        build=task_queue_mutants.reap_no_bump_model,
        # As built the bump changes no script's answer: see the .tla and README.
        expect=Expect.holds(),
    ),
    Check(
        spec="TaskQueue/TaskQueueByToken.tla",
        config="TaskQueue/TaskQueueByToken.cfg",
        build=task_queue_mutants.by_token_model,
        expect=Expect.holds(),
    ),
    Check(
        spec="TaskQueue/TaskQueueByToken.tla",
        config="TaskQueue/TaskQueueByToken_NoBump.cfg",
        build=task_queue_mutants.by_token_model,
        expect=Expect.violated("T1_OnePlace", depth=6),
    ),
    Check(
        spec="TaskFeed/TaskFeed.tla",
        config="TaskFeed/TaskFeed.cfg",
        build=task_feed.model,
        expect=Expect.holds(),
    ),
    Check(
        spec="TaskFeed/TaskFeed.tla",
        config="TaskFeed/TaskFeed_NoSilentLoss.cfg",
        build=task_feed.model,
        # A limitation of the design, not a mutant: an epoch-less cursor names no
        # log, so a log created and lost before the client read it goes unnoticed.
        expect=Expect.violated("NoSilentLoss", depth=6),
    ),
    Check(
        spec="TaskFeed/TaskFeedSplitAttach.tla",
        config="TaskFeed/TaskFeedSplitAttach.cfg",
        build=task_feed_split_attach.model,
        expect=Expect.violated("CaughtUpAfterResume", depth=5),
    ),
    Check(
        spec="TaskFeed/TaskFeedSplitAttach.tla",
        config="TaskFeed/TaskFeedSplitAttach_NoCaughtUpCheck.cfg",
        build=task_feed_split_attach.model,
        expect=Expect.violated("NoSilentGap", depth=6),
    ),
)
