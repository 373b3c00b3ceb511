"""What a handler's run ends as: its exception described as a `Failure` (never raising,
whatever the exception's class does), the retry its task's policy decides (the backoff
when the policy cannot say), and the `Outcome` the worker settles."""

from __future__ import annotations

import logging
import time
import traceback

from taskq.context import TaskContext
from taskq.errors import TimeLimitExceeded
from taskq.results import Failure, LeasedTask
from taskq.retry import BACKOFF, Decision, RetryPolicy, decision_problem
from taskq.worker.inbox import Outcome

log = logging.getLogger("taskq.worker")

MAX_SUMMARY_CHARS = 2000


def type_name(error: BaseException) -> str:
    """`module.Name` of the exception's class; builtins by their bare name. A class
    whose `__module__` or `__qualname__` is not a plain string goes by its bare name."""
    cls = type(error)
    module, name = getattr(cls, "__module__", None), getattr(cls, "__qualname__", None)
    if type(module) is not str or type(name) is not str:
        return cls.__name__
    return name if module == "builtins" else f"{module}.{name}"


def message_of(error: BaseException) -> str:
    """`str(error)`, or a placeholder when the exception's own `__str__` fails: a
    handler's exception is user code, and describing it must not raise in turn."""
    try:
        text = str(error)
    # Even SystemExit or KeyboardInterrupt raised by its __str__: escaping here, it
    # would end the handler's thread with its task still leased and renewed.
    except BaseException as e:
        return f"<str() of the {type_name(error)} raised {type_name(e)}>"
    return text if isinstance(text, str) else f"<str() of the {type_name(error)} " \
        f"returned a {type(text).__name__}>"


def describe(error: BaseException) -> Failure:
    """The exception as a `Failure`: its type, message and whole formatted traceback
    (chained causes included), with a one-line summary naming where it was raised.
    Never raises, whatever the exception's class does."""
    try:
        return _described(error)
    except BaseException as e:  # escaping, it would end a handler's thread, its task held
        return Failure(type(error).__name__, f"<describing it raised {type(e).__name__}>")


def _described(error: BaseException) -> Failure:
    message = message_of(error)
    summary = f"{type(error).__name__}: {message}"
    frames = traceback.extract_tb(error.__traceback__)
    if frames:
        last = frames[-1]
        summary += f" (at {last.filename}:{last.lineno} in {last.name})"
    try:
        formatted = "".join(traceback.format_exception(error))
    except BaseException:  # a cause or note whose __str__ raises: the frames alone
        formatted = "".join(["Traceback (most recent call last):\n",
                             *traceback.format_list(frames), f"{type_name(error)}: {message}\n"])
    return Failure(type_name(error), message, formatted, summary[:MAX_SUMMARY_CHARS])


def closes(outcome: Outcome) -> bool:
    """Whether reporting `outcome` may let a retry run, or the task's cancel be
    acknowledged: the effects of its run must be closed, and a block under way ended,
    before it is reported (TaskContext.close)."""
    return outcome.failure is not None or outcome.context.cancelled


def unstarted(task: LeasedTask, context: TaskContext) -> Outcome:
    """The outcome of a task whose handler never started (see `Runner`)."""
    return Outcome(task, context, None, started=False)


def decision(task: LeasedTask, policy: RetryPolicy, error: BaseException) -> Decision:
    """What the task's policy says of `error`. A `Retry` whose `delay` cannot be read,
    or is one a retry cannot wait (set after its check in `Retry.__init__`, or that
    never ran), is retried after the backoff; so is an attempt whose policy (a subclass
    of its own) raised or gave no decision an attempt can be settled by, which would
    stop the worker at the settle, and every worker that leased the task after it."""
    try:
        decided = policy.decide(error)
    # Even SystemExit from a `delay` property: escaping, it would end the handler's run
    # with its task still leased and renewed.
    except BaseException as e:
        log.warning("task %s: its %s: %s; retried after its backoff instead",
                    task.task_id, type_name(error), message_of(e))
        return backoff(policy)
    if (problem := decision_problem(decided)) is not None:
        log.warning("task %s: its retry policy's decision for its %s %s; retried after "
                    "its backoff instead", task.task_id, type_name(error), problem)
        return backoff(policy)
    return decided


def backoff(policy: RetryPolicy) -> Decision:
    """The policy's backoff, or the worker's settings' when the policy cannot say."""
    try:
        decided = policy.backoff()
    except BaseException:
        return BACKOFF
    return BACKOFF if decision_problem(decided) is not None else decided


def failed(task: LeasedTask, context: TaskContext, policy: RetryPolicy,
           error: BaseException) -> Outcome:
    """The outcome of a handler that raised `error`, settled as its task's policy says."""
    return Outcome(task, context, describe(error), decision=decision(task, policy, error))


def past_limit(context: TaskContext) -> bool:
    """Whether a run that has just returned or raised ran past its time limit: timed out
    by the time-limit thread, or past its deadline before that thread's next look."""
    return context.timed_out or context.overdue(time.monotonic())


def raised(task: LeasedTask, context: TaskContext, policy: RetryPolicy,
           error: BaseException) -> Outcome:
    """The outcome of a handler that raised `error`. Past its time limit (an async one's
    cleanup that raised, or a Retry in place of the CancelledError; a client whose own
    timeout is the limit, raising just after it), the attempt failed at its time limit,
    `error` its cause, as a handler that returned then: its retry policy judges
    `TimeLimitExceeded`, not whatever the late raise was."""
    if past_limit(context):
        return time_limit_outcome(task, context, policy, error)
    return failed(task, context, policy, error)


def cancelled(task: LeasedTask, context: TaskContext, policy: RetryPolicy,
              error: BaseException) -> Outcome:
    """The outcome of an async run cancelled (`error`). One cancelled while it waited for
    the gate never began: handed back as unstarted (settled cancelled if its task was).
    A cancelled task's run settles as cancelled whatever it raised (see Settler); a time
    limit's is a failure under the retry policy."""
    if not context.started_at:
        return unstarted(task, context)
    if context.timed_out:
        return time_limit_outcome(task, context, policy, error)
    return failed(task, context, policy, error)


def time_limit_outcome(task: LeasedTask, context: TaskContext, policy: RetryPolicy,
                       cancelled: BaseException | None) -> Outcome:
    """The outcome of a run ended at its time limit: a `TimeLimitExceeded` failure (with
    the cancellation as its cause, showing where an async handler was), settled as its
    task's policy says."""
    error = TimeLimitExceeded(f"task {task.task_id} ({task.name}) ran past its time limit "
                              f"of {context.time_limit:g}s")
    error.__cause__ = cancelled
    return Outcome(task, context, describe(error), decision=decision(task, policy, error))
