"""The chaos run's rate-limit checks: L1 for the rate-limited task, by the log's start
times, and every slot a throttled task waited for given back once it stopped waiting."""

from __future__ import annotations

from taskq.tools.chaos.schedules import THROTTLED_BURST, THROTTLED_PER_SECOND, THROTTLED_TASK


def starts_of(rows: list[tuple[int, dict[str, str]]], name: str) -> tuple[list[int], int]:
    """The Redis times (ms) of the leases of task `name`, in log order, and how many
    times one of its tasks was throttled: a task's name comes with its `enqueued`
    event."""
    named: set[str] = set()
    starts: list[int] = []
    throttled = 0
    for _, fields in rows:
        task, kind = fields.get("task", ""), fields.get("type", "")
        if kind == "enqueued" and fields.get("name", "") == name:
            named.add(task)
        elif task in named and kind == "leased":
            starts.append(int(fields["ts"]))
        elif task in named and kind == "throttled":
            throttled += 1
    return starts, throttled


def over_rate(starts: list[int], interval_ms: float, burst: int) -> int:
    """How many starts too many the busiest window of time holds, 0 when none does.

    GCRA's promise, as RateLimit.tla's NeverOverRate states it: for starts s_i <= s_j
    (sorted), j - i + 1 <= floor((s_j - s_i) / T) + B. With a_k = s_k - k*T that is
    a_j >= a_i - (B - 1) * T for every i <= j: one pass, keeping the largest a_i so far."""
    worst, highest = 0, float("-inf")
    for k, at in enumerate(sorted(starts)):
        a = at - k * interval_ms
        highest = max(highest, a)
        # Starts past the bound in the window that begins where `highest` was reached.
        excess = (highest - (burst - 1) * interval_ms - a) / interval_ms
        worst = max(worst, int(-(-excess // 1)) if excess > 0 else 0)
    return worst


RATE_CHECK = (f"L1: {THROTTLED_TASK} never started faster than {THROTTLED_PER_SECOND}/s "
              f"(burst {THROTTLED_BURST}), and every slot given back")


def rate_verdict(rows: list[tuple[int, dict[str, str]]], reserved_left: int
                 ) -> tuple[bool, str]:
    """RATE_CHECK's verdict and detail: L1 for the run's rate-limited task, by the log,
    and no slot left reserved once every task has ended (RateLimit.tla's NoGhostSlot: a
    cancelled task gives back its slot, so no later one waits behind it)."""
    starts, throttled = starts_of(rows, THROTTLED_TASK)
    excess = over_rate(starts, 1000 / THROTTLED_PER_SECOND, THROTTLED_BURST)
    return (excess == 0 and reserved_left == 0,
            f"{len(starts)} starts, {throttled} times throttled; "
            + (f"{excess} start(s) over the limit in the busiest window" if excess
               else "no window over the limit")
            + f"; {reserved_left} slot(s) still reserved after the drain")
