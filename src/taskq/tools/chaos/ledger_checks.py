"""The chaos run's ledger set against its event log: every completed task's effect was
applied, by a run the log shows holding it, and no charge was made by a run it does not
show. With "no task charged twice" beside it, that is exactly once, both halves."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence

from taskq.tools.ledger import Charge

# How long before a Redis crash an acknowledged write may be lost: appendfsync everysec
# writes the file once a second, and a fsync under way may hold the next one a second
# more (Redis then still answers, and may lose two).
LOSS_WINDOW_SECONDS = 2.5
# The producer reads its clock once the reply is parsed, the injector its own just
# before the kill: an answer Redis sent before the kill may read as after it.
CLOCK_SLACK_SECONDS = 0.5


def lost_to_a_crash(acknowledged_at: float, crashes: Sequence[float]) -> bool:
    """Whether a write Redis acknowledged at `acknowledged_at` (monotonic) is one a crash
    at one of `crashes` (monotonic) may lose: within LOSS_WINDOW_SECONDS before it (or
    CLOCK_SLACK_SECONDS after, as the two clocks are read)."""
    return any(-CLOCK_SLACK_SECONDS <= crash - acknowledged_at <= LOSS_WINDOW_SECONDS
               for crash in crashes)


def leased_tokens(rows: Iterable[tuple[int, Mapping[str, str]]]) -> dict[str, set[int]]:
    """Each task's tokens the log shows it leased with."""
    tokens: dict[str, set[int]] = {}
    for _, fields in rows:
        if fields.get("type") == "leased" and fields.get("token", "").isdigit():
            tokens.setdefault(fields.get("task", ""), set()).add(int(fields["token"]))
    return tokens


def ledger_verdict(rows: Sequence[tuple[int, Mapping[str, str]]], final: Mapping[str, str],
                   charges: Sequence[Charge], charged: Collection[str],
                   may_lose: bool) -> tuple[bool, str]:
    """Every task of `charged` (each charges once when its run gets that far) that ended
    completed has a charge, and every charge is by a token the log shows its task leased
    with. Where Redis may have lost acknowledged writes (`may_lose`), a charge whose
    lease event went with them is no fault."""
    per_task = Counter(c.task_id for c in charges)
    uncharged = sorted(t for t in charged if final.get(t) == "completed" and not per_task[t])
    tokens = leased_tokens(rows)
    by_no_run = [c for c in charges if c.token not in tokens.get(c.task_id, ())]
    ok = not uncharged and (not by_no_run or may_lose)
    detail = (f"{len(charges)} charges; {len(uncharged)} completed tasks with none"
              + (f", first: {uncharged[0]}" if uncharged else "")
              + f"; {len(by_no_run)} by a run the log does not show"
              + (f", first: {by_no_run[0].task_id} token {by_no_run[0].token}"
                 if by_no_run else "")
              + (" (Redis may have lost their leases)" if by_no_run and may_lose else ""))
    return ok, detail
