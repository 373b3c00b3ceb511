"""The bench's interleaved duels: single calls, `def` drains, and the probe of the
machine's speed beside them (bench/duel.py, bench/drain_duel.py, bench/speed.py)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from bench_support import ROOT, run_bench


class TestDuel:
    """The single-call enqueue duel's bookkeeping."""

    def test_each_round_runs_every_system_once_in_an_order_a_rerun_repeats(self) -> None:
        from bench.duel import System, order  # noqa: PLC0415

        systems = [System(name, name, Path(".")) for name in "abcdefg"]
        orders = [order(systems, round_) for round_ in range(5)]
        for ran in orders:
            assert sorted(s.name for s in ran) == list("abcdefg")
        assert orders == [order(systems, round_) for round_ in range(5)]
        assert len({ran[0].name for ran in orders}) > 1

    def test_commands_are_counted_per_call_with_the_script_s_own_time(self) -> None:
        from bench.duel import Runs  # noqa: PLC0415

        runs = Runs()
        for round_ in range(2):
            runs.add(round_, {"rate": 1000.0 * (round_ + 1), "calls": 100,
                              "client_cpu_us": 90.0, "server_cpu_us": 40.0,
                              "commands": {"evalsha": 100, "lpush": 200},
                              "usec": {"evalsha": 3000.0, "lpush": 400.0}})
        assert runs.script_us() == 30.0
        assert runs.commands_text() == "lpush 2.00, evalsha 1.00 (30.0 µs)"
        assert runs.rate.median == 1500.0
        assert runs.by_round == {0: 1000.0, 1: 2000.0}

    def test_a_system_without_a_script_has_no_script_time(self) -> None:
        from bench.duel import Runs  # noqa: PLC0415

        runs = Runs()
        runs.add(0, {"rate": 1.0, "calls": 10, "client_cpu_us": 1.0, "server_cpu_us": 1.0,
                     "commands": {"lpush": 10}, "usec": {"lpush": 5.0}})
        assert runs.script_us() is None
        assert runs.commands_text() == "lpush 1.00"

    @pytest.mark.processes
    def test_a_tiny_duel_times_taskq_and_names_the_fastest_peer(self, tmp_path: Path) -> None:
        report = run_bench("--only", "duel", out=tmp_path / "bench.md")
        assert "## Single-call enqueue beside the peers (3 interleaved rounds" in report
        assert "| **taskq** | `Task.enqueue()` | 100 | **" in report
        assert "| taskq's script from a bare socket (floor) | EVALSHA of `enqueue.lua`" in report
        assert "| one LPUSH from a bare socket (floor) | LPUSH of a 200-byte message" in report
        row = next(line for line in report.splitlines()
                   if line.startswith("| Single-call enqueue (`Task.enqueue`)"))
        if importlib.util.find_spec("huey") is not None:  # the peers come with `.[bench]`
            assert "| Huey | `noop()` | 100 |" in report
        else:
            assert "| Huey | `noop()` |  |" in report and "**not run**" in report
        # Judged against the fastest peer that ran (arq brings its own venv), never a floor.
        assert "(taskq " in row and " vs " in row and "floor" not in row, row
        assert "FAILED" not in report

class TestDrainDuel:
    """The interleaved `def` drain duel's bookkeeping."""

    def test_each_round_is_judged_against_that_round_s_fastest_peer(self) -> None:
        from bench.drain_duel import Drains, pairings  # noqa: PLC0415

        def round_ratios(taskq: Drains, peers: list[Drains]) -> list[float]:
            return [pairing.ratio for pairing in pairings(taskq, peers)]

        taskq, huey, dramatiq = Drains(), Drains(), Drains()
        taskq.by_round = {0: 9_000.0, 1: 6_000.0, 2: 8_000.0}
        huey.by_round = {0: 3_000.0, 1: 2_000.0, 2: 5_000.0}
        dramatiq.by_round = {0: 4_500.0, 1: 3_000.0}  # it failed in round 2
        assert round_ratios(taskq, [huey, dramatiq]) == [2.0, 2.0]
        assert round_ratios(taskq, [huey]) == [3.0, 3.0, 1.6]

    def test_a_round_read_in_a_slow_stretch_is_scaled_by_the_machine_s_slowdown(
        self
    ) -> None:
        from bench.drain_duel import Drains, pairings  # noqa: PLC0415

        taskq, huey, dramatiq = Drains(), Drains(), Drains()
        taskq.by_round, taskq.slowdown = {0: 6_000.0, 1: 9_000.0}, {0: 2.0, 1: 1.0}
        huey.by_round, huey.slowdown = {0: 3_000.0, 1: 3_000.0}, {0: 1.0}
        dramatiq.by_round, dramatiq.slowdown = {0: 2_000.0, 1: 1_000.0}, {0: 3.0, 1: 1.0}
        first, second = pairings(taskq, [huey, dramatiq])
        # Round 0: Huey is the fastest peer; taskq ran at half speed, so 2x reads 4x.
        assert (first.ratio, first.peer_slowdown, first.at_full_speed) == (2.0, 1.0, 4.0)
        # Round 1: no probe landed in Huey's window, so there is no scaled ratio.
        assert (second.ratio, second.peer_slowdown, second.at_full_speed) == (3.0, None, None)

class TestSpeedProbe:
    """The probe of the machine's own speed beside a duel's drains."""

    def test_the_probe_times_itself_on_the_cpu_clock_while_its_block_runs(self) -> None:
        import time  # noqa: PLC0415

        from bench.speed import SpeedProbe  # noqa: PLC0415

        before = time.perf_counter()
        with SpeedProbe(period=0.01) as probe:
            time.sleep(0.3)
            start, end = before, time.perf_counter()
        after = time.perf_counter()
        time.sleep(0.05)
        fastest, during = probe.fastest(), probe.during(start, end)
        assert fastest is not None and during is not None
        assert 0 < fastest <= during < 0.1
        slowdown = probe.slowdown(start, end)
        assert slowdown is not None and slowdown >= 1.0
        # Nothing is probed after the block, nor before it began.
        assert probe.during(after, time.perf_counter()) is None
        assert probe.slowdown(before - 1.0, before) is None

    def test_taskq_runs_the_readme_s_recommended_command_for_def_handlers(self) -> None:
        from bench.cpu_drain import RECOMMENDED, command  # noqa: PLC0415
        from bench.incr_floor import CORES  # noqa: PLC0415

        assert RECOMMENDED == (CORES + 1, 16, 112)
        assert command((2, 8, 0)) == "`taskq worker --processes 2 -c 8`"
        assert command((3, 16, 112)) == "`taskq worker --processes 3 -c 16 --prefetch 112`"
        readme = " ".join((ROOT / "README.md").read_text().split())
        assert "`taskq worker --processes N --concurrency 16 --prefetch 112`, N the cores (one " \
               "more when Redis shares the machine" in readme

    @pytest.mark.processes
    # The tally drain runs at about twice the INCR drain's rate, so it gets more tasks to
    # leave its 5% and 95% marks apart on a loaded machine.
    @pytest.mark.parametrize(("only", "n", "counted", "verdict"), [
        ("drainduel", 2000, "counted by one Redis INCR", "| Drain, `def` handler"),
        ("tallyduel", 6000, "counted by a one-byte tally-file append",
         "| Drain, one `taskq worker` command"),
    ])
    def test_a_tiny_duel_counts_every_drain_and_judges_taskq(
        self, tmp_path: Path, only: str, n: int, counted: str, verdict: str
    ) -> None:
        report = run_bench("--only", only, "--n", str(n), out=tmp_path / "bench.md")
        assert f"## `def` handlers, the no-op {counted}: taskq beside the peers in 3 " \
               "interleaved rounds" in report
        from bench.cpu_drain import RECOMMENDED, command  # noqa: PLC0415

        assert f"| **taskq** | {command(RECOMMENDED)} | {n // 2:,} | **" in report
        row = next(line for line in report.splitlines()
                   if line.startswith(verdict) and "interleaved" in line)
        if importlib.util.find_spec("huey") is not None:  # the peers come with `.[bench]`
            assert "| Huey (3 processes) |" in report and "round by round: " in report
            assert f"({command(RECOMMENDED)} " in row, row
            speeds = re.search(r"taskq / the round's fastest peer, round by round, .*?: "
                               r"((?:[\d.?]+ / [\d.]+(?:, )?)+)\.", report)
            assert speeds is not None, report
            # Three rounds, each a pair of slowdowns of at least full speed; taskq's drain
            # of 1,000 tasks may fall between two of the probe's samples ("?"), a peer's
            # (several times as long) never does.
            pairs = [pair.split(" / ") for pair in speeds.group(1).split(", ")]
            assert len(pairs) == 3, pairs
            assert all(float(x) >= 1.0 for pair in pairs for x in pair if x != "?"), pairs
        else:
            assert "**not run**" in report and "not measured in this run" in row, row
        assert "FAILED" not in report
