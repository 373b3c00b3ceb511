"""`python -m bench.lease_cost`: Redis's own microseconds a lease call, with a rate limit
applied, a concurrency limit (kept per key or not) and none, counted over exactly the
leases made, each limited run holding its slot, or the run fails."""

from __future__ import annotations

import re

import pytest
from bench import lease_cost

from taskq import Broker


def test_a_small_run_prints_every_kind_of_lease_each_round_and_their_median(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert lease_cost.main(["--tasks", "40", "--rounds", "2"]) == 0
    out = capsys.readouterr().out
    for kind in ("rate", "concurrency", "keyed", "unlimited"):
        line = next(x for x in out.splitlines() if x.startswith(f"{kind}:"))
        figures = [float(f) for f in re.findall(r"(\d+\.\d)", line)]
        assert len(figures) == 3 and all(f > 0 for f in figures), line


def test_a_run_whose_script_calls_do_not_match_its_leases_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def twice(self: Broker, *args: object, **kwargs: object) -> object:
        self.promote()  # another script call, which the count must catch
        return original(self, *args, **kwargs)

    original = Broker.lease_many
    monkeypatch.setattr(Broker, "lease_many", twice)
    with pytest.raises(SystemExit, match="script calls for 39 leases"):
        lease_cost.main(["--tasks", "40", "--rounds", "1"])


def test_a_run_whose_limited_leases_hold_no_slot_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    def forgetting(self: Broker, *args: object, **kwargs: object) -> object:
        self.concurrency_limits = ()  # every lease as if no worker limited the name
        return original(self, *args, **kwargs)

    original = Broker.lease_many
    monkeypatch.setattr(Broker, "lease_many", forgetting)
    with pytest.raises(SystemExit, match="0 of 40 runs hold a concurrency slot"):
        lease_cost.main(["--tasks", "40", "--rounds", "1"])
