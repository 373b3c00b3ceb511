"""The queues one worker leases from: each through its own broker, the order a turn tries
them in, and the leases that fill the free slots in that order."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeAlias, TypeVar

from taskq.broker import Broker
from taskq.errors import BrokerError, ConfigError, InvalidTaskError
from taskq.keys import check_queue_name
from taskq.limits import QUEUE_WEIGHT, shown
from taskq.results import LeaseBatch
from taskq.shards import Layout

log = logging.getLogger("taskq.worker")

T = TypeVar("T")

QueueChoice: TypeAlias = Sequence[str] | Mapping[str, int]
"""The queues a worker leases from: names, tried in that order (strict), or names with
weights, the queue tried first picked in proportion to them (weighted)."""


def parse_queues(text: str) -> QueueChoice:
    """`--queue`'s value: `high,default,low` (strict order) or `high:3,default:1`
    (weighted; a name given without a weight weighs 1). Raises ConfigError."""
    names: list[str] = []
    weights: list[int] = []
    for item in text.split(","):
        name, colon, weight = item.strip().partition(":")
        try:
            check_queue_name(name)
        except InvalidTaskError as e:
            raise ConfigError(f"--queue {shown(text)}: {e}") from None
        what = f"--queue {shown(text)}: the weight of {shown(name)}"
        # The length too: int() of thousands of digits is slow, then refused by Python.
        if colon and not (weight.isascii() and weight.isdigit() and len(weight) <= 9):
            raise ConfigError(f"{what} must be {QUEUE_WEIGHT.rule}, not {shown(weight)}")
        names.append(name)
        weights.append(QUEUE_WEIGHT.check(int(weight), what, error=ConfigError) if colon
                       else QUEUE_WEIGHT.default)
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ConfigError(f"--queue {shown(text)}: names {', '.join(map(shown, twice))} "
                          "twice")
    return dict(zip(names, weights, strict=True)) if ":" in text else names


def queue_choice(queues: object) -> tuple[list[str], list[int] | None]:
    """A `QueueChoice` as names and weights (None: strict); anything else, or a name no
    queue can have, is refused (a ConfigError, as every other worker setting)."""
    if isinstance(queues, Mapping):
        names, weights = list(queues), list(queues.values())
    elif isinstance(queues, str | bytes) or not isinstance(queues, Sequence):
        raise ConfigError(f"queues must be a list of names or a mapping of names to "
                          f"weights, not {shown(queues)}")
    else:
        names, weights = list(queues), None
    for name in names:
        try:
            check_queue_name(name)
        except InvalidTaskError as e:
            raise ConfigError(f"queues: {e}") from None
    return names, weights


def with_shards(layout: Layout, names: list[str], weights: list[int] | None
                ) -> tuple[list[str], list[int]]:
    """`names` and `weights` with the sharded queue `layout.queue` replaced by its shards,
    each weighing what the queue did (1 alone), so the shards take turns; refused in
    strict order with other queues, where every shard but the first would wait on it."""
    if weights is None and len(names) > 1:
        raise ConfigError(f"queue {layout.queue!r} has {layout.count} shards: on a worker "
                          "of several queues give weights (--queue "
                          f"{':1,'.join(names)}:1), so its shards take turns")
    weight = dict(zip(names, weights or [QUEUE_WEIGHT.default], strict=True))
    expanded = [(shard, weight[name]) for name in names
                for shard in (layout.shards if name == layout.queue else (name,))]
    return [n for n, _ in expanded], [w for _, w in expanded]


class Queues:
    """The queues a worker leases from, each through its own `Broker` (all on one client),
    and the order each turn tries them in.

    Strict (no weights): always in the order given, so a queue gets slots only while the
    ones before it have no ready task. Weighted: the queue tried first is picked in
    proportion to its weight by smooth weighted round robin (with weights 3 and 1, three
    turns in every four start with the first queue, evenly spread), the others then in
    the order given; so every queue is tried first in its share of turns, however busy
    the others are, and none is starved. `order` belongs to the loop's thread."""

    def __init__(self, brokers: Sequence[Broker], weights: Sequence[int] | None = None) -> None:
        if not brokers:
            raise ConfigError("a worker needs at least one queue")
        names = [b.queue for b in brokers]
        if len(set(names)) != len(names):
            raise ConfigError(f"a worker's queues must differ: {', '.join(names)}")
        if any(b.client is not brokers[0].client for b in brokers):
            raise ConfigError("a worker's queues must share one Redis client")
        if weights is not None:
            if len(weights) != len(brokers):
                raise ConfigError(f"{len(weights)} weights for {len(brokers)} queues")
            for name, weight in zip(names, weights, strict=True):
                QUEUE_WEIGHT.check(weight, f"the weight of queue {name!r}", error=ConfigError)
        self.brokers = tuple(brokers)
        self.weights = None if weights is None else tuple(weights)
        self._by_name = dict(zip(names, self.brokers, strict=True))
        self._credit = [0] * len(brokers)

    @classmethod
    def of(cls, broker: Broker) -> Queues:
        """One queue: the worker leases from `broker` alone."""
        return cls([broker])

    def __len__(self) -> int:
        return len(self.brokers)

    def __iter__(self) -> Iterator[Broker]:
        return iter(self.brokers)

    @property
    def first(self) -> Broker:
        return self.brokers[0]

    @property
    def names(self) -> list[str]:
        return list(self._by_name)

    def broker(self, queue: str) -> Broker:
        """The broker of `queue`, one of this worker's: where its tasks are settled."""
        return self._by_name[queue]

    def by_queue(self, items: Iterable[T], queue_of: Callable[[T], str]
                 ) -> dict[str, list[T]]:
        """`items` grouped by their queue (`queue_of`), in the order first seen, so each
        queue's share goes in one call; on one queue, all of them under its name."""
        if len(self.brokers) == 1:
            return {self.brokers[0].queue: list(items)}
        grouped: dict[str, list[T]] = {}
        for item in items:
            grouped.setdefault(queue_of(item), []).append(item)
        return grouped

    def describe(self) -> str:
        """The queues and their order, for the worker's first log line."""
        if self.weights is None:
            return f"queues {', '.join(map(repr, self.names))} (strict order)"
        return "queues " + ", ".join(f"{n!r}:{w}" for n, w in zip(self.names, self.weights,
                                                                strict=True)) + " (weighted)"

    def order(self) -> tuple[Broker, ...]:
        """The order of one turn's leases: the first queue gets the free slots, the next
        whatever the first left, and so on."""
        if self.weights is None:
            return self.brokers
        first = self._pick()
        if first == 0:
            return self.brokers
        return (self.brokers[first], *self.brokers[:first], *self.brokers[first + 1:])

    def _pick(self) -> int:
        """Smooth weighted round robin (as nginx balances upstreams): each queue earns its
        weight in credit every turn, and the richest goes first and pays the total back.
        Over any run of turns each queue goes first its share, give or take one turn."""
        assert self.weights is not None
        credit = self._credit
        for i, weight in enumerate(self.weights):
            credit[i] += weight
        best = max(range(len(credit)), key=credit.__getitem__)
        credit[best] -= sum(self.weights)
        return best


@dataclass(frozen=True, slots=True)
class Leased:
    """What one lease call took from one queue, and when (monotonic) it was sent."""

    broker: Broker
    batch: LeaseBatch
    sent_at: float


@dataclass(frozen=True, slots=True)
class Leases:
    """What one turn leased, queue by queue in the order it tried them."""

    taken: tuple[Leased, ...]

    @property
    def count(self) -> int:
        return sum(len(leased.batch.tasks) for leased in self.taken)

    @property
    def wait_seconds(self) -> float | None:
        """The soonest of the queues' hints (the next delayed task due or lease to expire);
        None when none has one."""
        hints = [w for leased in self.taken if (w := leased.batch.wait_seconds) is not None]
        return min(hints) if hints else None


class Leaser:
    """Fills free slots from the queues in a turn's order: one lease call per queue tried,
    the next queue only when the ones before it left slots free."""

    def __init__(self, worker_id: str, lease_seconds: float) -> None:
        self.worker_id = worker_id
        self.lease_seconds = lease_seconds

    def fill(self, free: int, order: Sequence[Broker], carried: Leased | None = None
             ) -> Leases | None:
        """Lease up to `free` tasks, from `order[0]` first. `carried` is the lease of
        `order[0]` already made (it travelled with the acks); leasing goes on from the
        next queue. None when there was nothing to lease for.

        A queue whose lease call fails (its primary unreachable, on a cluster) is
        skipped for this turn, so the others go on; raises BrokerError only when every
        queue it tried failed."""
        if carried is None and free <= 0:
            return None
        taken = [] if carried is None else [carried]
        left = free - (0 if carried is None else len(carried.batch.tasks))
        failed: list[tuple[Broker, BrokerError]] = []
        for broker in order[len(taken):]:
            if left <= 0:
                break
            sent = time.monotonic()
            try:
                batch = broker.lease_many(self.worker_id, self.lease_seconds, left)
            except BrokerError as e:
                failed.append((broker, e))
                continue
            taken.append(Leased(broker, batch, sent))
            left -= len(batch.tasks)
        if not taken and failed:
            raise failed[-1][1]  # every queue failed: the loop reports it as an outage
        for broker, error in failed:
            log.info("lease from queue %r failed; the other queues went on: %s",
                     broker.queue, error)
        return Leases(tuple(taken))
