"""Every Redis key name taskq uses, built in this one module, and the rules for the
names a caller gives: queues, task ids, task names and idempotency keys.

All keys of a queue share the hash tag `{taskq:<queue>}`, so a queue lives in one
Redis Cluster slot and its scripts never cross slots; different queues spread out.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass

from taskq.errors import InvalidTaskError
from taskq.limits import PRIORITY, TOKEN, shown, utf8

# A queue's name, or a shard's: `<queue>~<n>` (see taskq.shards).
QUEUE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}(?:~[0-9]{1,7})?")
SHARD_MARK = "~"
# "." and ".." are refused: as a segment of a URL path (`/api/tasks/..`) a browser or
# an HTTP client resolves them away before the request leaves.
TASK_ID = re.compile(r"(?!\.\.?\Z)[A-Za-z0-9_.:\-]{1,128}")
# A registered function's name: module.qualname by default.
TASK_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:\-]{0,199}")
# A workflow's id; its steps are the tasks `<flow id>.<stage>.<index>` (see _flow.lua).
FLOW_ID = re.compile(r"[A-Za-z0-9_\-]{1,100}")
FLOW_ID_RULE = "1-100 letters, digits, '_' or '-'"
MAX_IDEMPOTENCY_KEY_BYTES = 512
MAX_LIMIT_KEY_BYTES = 512

# Every queue's name, so dashboards can find queues without scanning the keyspace.
QUEUES_KEY = "taskq:queues"
# How long a producer trusts that it named its queue there (and its shards' layout):
# a Redis that lost its data (restarted with none, flushed) lists the queue again,
# and its feed serves it, within this long of the next enqueue.
REGISTER_AGAIN_SECONDS = 60.0


class Registration:
    """When a producer last named its queue (or its shards' layout) in Redis: `due`
    once REGISTER_AGAIN_SECONDS have passed on the monotonic clock, and at first."""

    __slots__ = ("_at",)

    def __init__(self) -> None:
        self._at = -math.inf

    def due(self) -> bool:
        return time.monotonic() - self._at >= REGISTER_AGAIN_SECONDS

    def done(self) -> None:
        self._at = time.monotonic()


def new_id() -> str:
    """A random id of 32 hex digits (all 128 bits random; `uuid4().hex`'s length and
    alphabet), made without building a UUID object on every enqueue."""
    return os.urandom(16).hex()


QUEUE_NAME_RULE = ("1-100 letters, digits, '_', '.' or '-', starting with a letter or digit "
                   "(a shard's name adds '~' and its number)")


def check_queue_name(queue: str) -> str:
    """Return `queue` if it is a valid queue name, else raise `InvalidTaskError`."""
    if not isinstance(queue, str) or not QUEUE_NAME.fullmatch(queue):
        raise InvalidTaskError(
            f"invalid queue name {shown(queue)}: use {QUEUE_NAME_RULE}"
        )
    return queue


TASK_ID_RULE = "1-128 letters, digits, '_', '.', ':' or '-', other than '.' and '..'"


def check_task_id(task_id: str) -> str:
    """Return `task_id` if it is a valid task id, else raise `InvalidTaskError`."""
    if not isinstance(task_id, str) or not TASK_ID.fullmatch(task_id):
        raise InvalidTaskError(f"invalid task id {shown(task_id)}: use {TASK_ID_RULE}")
    return task_id


def check_flow_id(flow_id: str) -> str:
    """Return `flow_id` if it can name a workflow, else raise `InvalidTaskError`."""
    if not isinstance(flow_id, str) or not FLOW_ID.fullmatch(flow_id):
        raise InvalidTaskError(f"invalid workflow id {shown(flow_id)}: use {FLOW_ID_RULE}")
    return flow_id


def flow_step_id(flow_id: str, stage: int, index: int) -> str:
    """The task id of step `index` of stage `stage` (both from 1) of workflow `flow_id`."""
    return f"{flow_id}.{stage}.{index}"


# The task a schedule's tick becomes; fire.lua builds the same id from the same parts.
SCHEDULE_TASK_PREFIX = "sched:"


def schedule_task_id(schedule: str, tick_ms: int) -> str:
    """The id of the one task schedule `schedule` makes for the tick at `tick_ms`."""
    return f"{SCHEDULE_TASK_PREFIX}{schedule}:{tick_ms}"


def check_held(held: object) -> list[tuple[str, int]]:
    """`held` as checked `(task_id, token)` pairs, or `InvalidTaskError` saying which is not."""
    if type(held) is not list and (isinstance(held, str | bytes)
                                   or not isinstance(held, Sequence)):
        raise InvalidTaskError(f"held must be a sequence of (task_id, token) pairs, not "
                               f"{shown(held)}")
    pairs = []
    for pair in held:
        # A worker's own pairs, a str and an int in a tuple, pass without the general
        # checks below (abstract class tests, a call per value): a batch's acks are
        # checked on the worker's loop thread, which every handler's GIL waits on.
        if type(pair) is tuple and len(pair) == 2 and type(pair[1]) is int \
                and TOKEN.low <= pair[1] <= TOKEN.high and type(pair[0]) is str \
                and TASK_ID.fullmatch(pair[0]):
            pairs.append(pair)
            continue
        if isinstance(pair, str | bytes) or not isinstance(pair, Sequence) or len(pair) != 2:
            raise InvalidTaskError(f"each held task must be a (task_id, token) pair, not "
                                   f"{shown(pair)}")
        pairs.append((check_task_id(pair[0]), TOKEN.check(pair[1])))
    return pairs


def check_task_name(name: str) -> str:
    """Return `name` if it can name a task, else raise `InvalidTaskError`."""
    if not isinstance(name, str) or not TASK_NAME.fullmatch(name):
        nested = isinstance(name, str) and "<locals>" in name
        anonymous = isinstance(name, str) and "<lambda>" in name and not nested
        raise InvalidTaskError(
            f"invalid task name {shown(name)}: use 1-200 letters, digits, '_', '.', ':' or "
            "'-', starting with a letter or '_'"
            + ("; a function defined inside another (<locals>) needs an explicit name: "
               "@app.task('name')" if nested else "")
            + ("; a lambda has no name of its own: name the task, app.task('name')(fn), "
               "or define it with def" if anonymous else "")
        )
    return name


def check_idempotency_key(key: str) -> str:
    """Return `key` if it can name an idempotency record, else raise `InvalidTaskError`."""
    return _check_key_text(key, "idempotency key", MAX_IDEMPOTENCY_KEY_BYTES)


def check_limit_key(key: str) -> str:
    """Return `key` if a keyed concurrency limit can be kept per it (it becomes part of
    the slot keys' names), else raise `InvalidTaskError`."""
    return _check_key_text(key, "concurrency key", MAX_LIMIT_KEY_BYTES)


def _check_key_text(key: str, what: str, max_bytes: int) -> str:
    """`key` if it is UTF-8 text of 1 to `max_bytes` bytes, to become part of a key name."""
    if not isinstance(key, str) or not key or not utf8(key) or len(key.encode()) > max_bytes:
        raise InvalidTaskError(
            f"invalid {what} {shown(key)}: must be UTF-8 text of 1 to {max_bytes} bytes")
    return key


@dataclass(frozen=True)
class QueueKeys:
    """The keys of one queue. Scripts derive per-task keys from `prefix` in Lua."""

    queue: str

    def __post_init__(self) -> None:
        check_queue_name(self.queue)

    @property
    def prefix(self) -> str:
        return f"{{taskq:{self.queue}}}:"

    @property
    def ready(self) -> str:
        return self.prefix + "ready"

    @property
    def ready_levels(self) -> str:
        """The priorities other than the default that have ready tasks (a ZSET); each
        waits on `ready_at(priority)`, the default on `ready` (see _common.lua)."""
        return self.ready + ":levels"

    def ready_at(self, priority: int) -> str:
        """The ready list of tasks of `priority` (the default's is `ready` itself)."""
        return self.ready if priority == PRIORITY.default else f"{self.ready}:{priority}"

    @property
    def parked_names(self) -> str:
        """The concurrency-limited task names with tasks parked for a slot (a SET)."""
        return self.prefix + "parked"

    @property
    def slots_freed(self) -> str:
        """The concurrency groups with parked tasks whose slot came free since a lease
        last looked at them (a SET): see lua/lease.lua."""
        return self.prefix + "slots_freed"

    @property
    def parked_sweep(self) -> str:
        """Where a lease's turn over every group with parked tasks stands (an SSCAN
        cursor, a STRING): see lua/lease.lua."""
        return self.prefix + "parked_sweep"

    @property
    def parked_line(self) -> str:
        """The counter that gives each parked task its place in its line (a STRING)."""
        return self.prefix + "parked_line"

    def parked(self, name: str) -> str:
        """The tasks of `name` (or of the group `<name>|<key>` of a limit kept per key)
        waiting, still pending, for a concurrency slot (a LIST, oldest at the left): see
        taskq.concurrency."""
        return f"{self.prefix}parked:{name}"

    def holding(self, name: str) -> str:
        """The ids of the runs of `name` (or of a group `<name>|<key>`) holding a
        concurrency slot (a SET)."""
        return f"{self.prefix}holding:{name}"

    def unparked(self, name: str) -> str:
        """The tasks of `name` (or of a group) sent back to ready from its parked list,
        each with a slot promised, until a lease pops it (a SET)."""
        return f"{self.prefix}unparked:{name}"

    def groups(self, name: str) -> str:
        """The keyed groups (`<name>|<key>`) of a concurrency limit kept per key that
        hold a slot or wait for one (a SET)."""
        return f"{self.prefix}groups:{name}"

    def keyed(self, name: str) -> str:
        """The runs of `name` holding a slot of one of its keyed groups (a SET): with
        `holding(name)`, every run of the name, which a limit not kept per key counts."""
        return f"{self.prefix}keyed:{name}"

    @property
    def limits(self) -> str:
        """Each concurrency-limited task name's limit as leases last applied it (a HASH,
        for dashboards)."""
        return self.prefix + "limits"

    @property
    def rates(self) -> str:
        """Each rate-limited task name's theoretical start time (us): see taskq.rates."""
        return self.prefix + "rates"

    def reserved(self, limit: str) -> str:
        """The slots (us) throttled tasks wait for under a rate limit (a ZSET; `limit` a
        task name, or taskq.rates.QUEUE_LIMIT): see lua/_rates.lua."""
        return f"{self.prefix}reserved:{limit}"

    def holders(self, limit: str) -> str:
        """The workers whose leases applied a rate limit as stored, as their own (a ZSET:
        worker id -> ms): while one lives, a lease declaring it otherwise applies it as
        stored (see lua/lease.lua's live_holder)."""
        return f"{self.prefix}holders:{limit}"

    @property
    def leased(self) -> str:
        return self.prefix + "leased"

    @property
    def delayed(self) -> str:
        return self.prefix + "delayed"

    @property
    def dlq(self) -> str:
        return self.prefix + "dlq"

    @property
    def events(self) -> str:
        return self.prefix + "events"

    @property
    def seq(self) -> str:
        """Counter of the last event id; bumped in the same script that appends."""
        return self.prefix + "events:seq"

    @property
    def epoch(self) -> str:
        """Identifies one incarnation of the event log; renewed when the log is recreated."""
        return self.prefix + "events:epoch"

    @property
    def stats(self) -> str:
        """Lifetime event totals by `type:state`; named after the stream, whose scripts
        derive it, so it shares the queue's hash tag."""
        return self.events + ":stats"

    @property
    def wake(self) -> str:
        """Tokens that wake idle workers blocked on BLPOP when work becomes ready."""
        return self.prefix + "wake"

    def task(self, task_id: str) -> str:
        return self.prefix + "task:" + task_id

    def done(self, task_id: str) -> str:
        """Filled when a task someone waits for ends; waiters block on it (watch.lua)."""
        return self.prefix + "done:" + task_id

    @property
    def schedules(self) -> str:
        """Periodic schedules' records: `last:<name>` (the last tick handled, ms),
        `version:<name>` (the definition's hash) and `definition:<name>` (its JSON)."""
        return self.prefix + "schedules"

    def flow(self, flow_id: str) -> str:
        """A workflow's record (a HASH; its fields are described in _flow.lua)."""
        return self.prefix + "flow:" + flow_id

    def idem(self, key: str) -> str:
        return self.prefix + "idem:" + key

    @property
    def workers(self) -> str:
        """The workers registered on the queue, by the time (ms) their record expires
        (a ZSET; see taskq.registry)."""
        return self.prefix + "workers"

    @property
    def dead_ttls(self) -> str:
        """How long each registered worker keeps a dead task (a ZSET: worker id -> ms),
        so the longest a live worker keeps is one read, however many workers there are."""
        return self.prefix + "workers:dead_ttl"

    @property
    def runners(self) -> str:
        """The task names registered workers run (a ZSET: name -> the latest time (ms)
        a record of a worker that runs it expires)."""
        return self.prefix + "workers:tasks"

    def worker(self, worker_id: str) -> str:
        """One registered worker's record (a HASH), expiring a lease after its last
        heartbeat."""
        return self.prefix + "worker:" + worker_id

    def lease_request(self, request_id: str) -> str:
        """What one lease request handed out, so a retried request gets the same tasks."""
        return self.prefix + "lreq:" + request_id
