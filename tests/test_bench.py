"""The bench harness runs end to end and writes its report (a smoke run, tiny N)."""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import redis

ROOT = Path(__file__).resolve().parent.parent


def run_bench(*args: str, out: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--repeats", "1", "--out", str(out), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return out.read_text()


class TestBench:
    def test_enqueue_writes_its_table_and_the_machine(self, tmp_path: Path) -> None:
        report = run_bench("--only", "enqueue", out=tmp_path / "bench.md")
        assert "## Enqueue rate" in report
        assert "| how | tasks | tasks/s (median) | spread |" in report
        assert "| `enqueue_many`, batches of 1000 (default) | 400 |" in report
        for fact in ("- Date:", "- Machine:", "- Python", "- Redis server", "- Packages:"):
            assert fact in report
        assert "## Targets (issues 7, 16, 18 and 21)" in report

    @pytest.mark.processes
    def test_a_tiny_drain_counts_every_task(self, tmp_path: Path) -> None:
        report = run_bench("--only", "drain", "--n", "600", out=tmp_path / "bench.md")
        assert "## Drain rate" in report
        assert "`async def` no-op, best** | 1 x 8 | 600 |" in report
        # An eighth of 600 could finish between two polls of the count; the sweep keeps
        # enough tasks to time.
        assert "| `def` no-op | 1 x 8 | 400 |" in report
        assert "FAILED" not in report

    @pytest.mark.processes
    def test_a_tiny_ceiling_run_times_the_scripts_below_and_at_the_log_s_retention(
        self, tmp_path: Path
    ) -> None:
        report = run_bench("--only", "ceiling", "--n", "400", out=tmp_path / "bench.md")
        assert "## The Redis ceiling, and taskq's Redis work per task" in report
        for where in ("below its retention", "at its retention (1,000 events kept)"):
            row = next(line for line in report.splitlines()
                       if line.startswith("| Redis time in the lease + ack scripts")
                       and f"the log {where} |" in line)
            figures = re.search(r"\| ([\d.]+) \+ ([\d.]+) µs \|", row)
            assert figures is not None, row
            assert all(float(us) > 0 for us in figures.groups()), row
        assert "FAILED" not in report

    @pytest.mark.processes
    def test_a_tiny_sharded_drain_spreads_the_redis_work_over_the_primaries(
        self, tmp_path: Path
    ) -> None:
        report = run_bench("--only", "shards", "--n", "3000", out=tmp_path / "bench.md")
        assert "## One queue over three primaries: 1 shard vs 3" in report
        rows = {line.split(" | ")[0]: line.split(" | ")[-1].strip(" |").split(" / ")
                for line in report.splitlines()
                if line.startswith(("| 1 shard (one slot) |", "| 3 shards |"))}
        one, three = ([float(us) for us in rows[k]] for k in ("| 1 shard (one slot)",
                                                             "| 3 shards"))
        # Each primary's idle work (cluster bus, cron) counts too, over a short drain: so
        # compare the layouts, not one primary with the others. One slot: its primary
        # does more per task than any primary of three; three: each does a share.
        assert max(one) > 1.3 * max(three), (one, three)
        assert min(three) > max(three) / 3, three
        assert "FAILED" not in report

    @pytest.mark.processes
    def test_a_tiny_results_run_times_result_and_its_cost(self, tmp_path: Path) -> None:
        report = run_bench("--only", "results", "--n", "1200", out=tmp_path / "bench.md")
        assert "## Results: their cost to a drain, and `result()` latency" in report
        assert "| drain with results kept vs off | `def` handler |" in report
        assert "| `result()` after the handler returned | `async def` handler | p50 " in report
        assert "FAILED" not in report

    @pytest.mark.processes
    def test_a_tiny_limits_run_keeps_the_rate_and_prices_priorities(
        self, tmp_path: Path
    ) -> None:
        report = run_bench("--only", "limits", "--n", "2000", out=tmp_path / "bench.md")
        assert "## Flow control: rate limits and priorities" in report
        row = next(line for line in report.splitlines()
                   if line.startswith("| rate-limited drain vs its limit |"))
        share = float(row.split("|")[2].strip().rstrip("%")) / 100
        # Never faster than the limit allows: of the 500 tasks timed from the 5% mark
        # (475), a burst may start at once and the rest at the rate, so the rate measured
        # is at most 475 / (475 - burst) of the limit (plus 5% for the timing's edges).
        from bench.tasks import LIMITED_BURST  # noqa: PLC0415

        assert 0 < share <= 1.05 * 475 / (475 - LIMITED_BURST), row
        assert "| drain with priorities 0-9 vs all default |" in report
        assert "FAILED" not in report

    @pytest.mark.processes
    def test_a_tiny_heartbeat_run_renews_each_process_s_leases_in_one_call_a_beat(
        self, tmp_path: Path
    ) -> None:
        report = run_bench("--only", "heartbeats", "--n", "2000", out=tmp_path / "bench.md")
        assert "## Heartbeats at scale: long-running tasks in hand" in report
        row = next(line for line in report.splitlines()
                   if line.startswith("| `--processes 2 -c 100` | `async def` | 200 |"))
        split = row.split(" | ")[3]  # e.g. "12.0 (2.0 + 2.0 + 8.0)"
        heartbeat, registry, _other = (float(x) for x in split.split("(")[1].rstrip(")")
                                       .split(" + "))
        # Two processes of 100 leases each: a call per process per beat (a beat more or
        # less at the census window's edges), never one per lease.
        assert 1.0 <= heartbeat <= 3.0, row
        assert 1.0 <= registry <= 3.0, row
        assert "without events (" in report
        assert "FAILED" not in report


@pytest.mark.processes
class TestTally:
    """The peers' counted no-op: one byte per run in a tally file."""

    @pytest.mark.parametrize("handler", ["bench.tally_async", "bench.tally_sync"])
    def test_a_tally_counted_drain_counts_each_run_once_across_two_processes(
        self, handler: str
    ) -> None:
        from bench.drain import DrainPlan, run_drain  # noqa: PLC0415
        from bench.harness import BenchError, Server  # noqa: PLC0415
        from bench.peers.driver import new_count  # noqa: PLC0415

        server = Server()
        try:
            count = new_count(server, "tally", "test")
            # Enough tasks that the drain outlasts a few of time_drain's polls, so that
            # it can be timed however fast both processes take them.
            plan = DrainPlan(handler, 2000, 8, processes=2, env=tuple(count.env().items()))
            run_drain(server, plan, extra_checks=lambda: count.check(server, 2000))
            assert count.reader(server)() == 2000
            with pytest.raises(BenchError, match="counted 2000 runs for 2001 tasks"):
                count.check(server, 2001)
        finally:
            server.close()


class TestMachine:

    @staticmethod
    def redis_line(version: str) -> str:
        import datetime  # noqa: PLC0415

        from bench.harness import Options  # noqa: PLC0415
        from bench.report import Machine  # noqa: PLC0415

        machine = Machine(version, "TCP (127.0.0.1)", (0.0, 0.0, 0.0),
                          datetime.datetime.now(datetime.UTC),
                          redis_binary="/venv/bin/redis-server")
        return next(line for line in machine.lines(Options(), {})
                    if line.startswith("- Redis server"))

    def test_the_report_names_the_redis_binary_it_ran(self) -> None:
        line = self.redis_line("7.0.15")
        assert line.startswith("- Redis server 7.0.15 (`/venv/bin/redis-server`)")
        assert "older than" not in line

    @pytest.mark.parametrize("version", ["6.2.14", "5.0.7"])
    def test_a_redis_older_than_7_is_flagged_as_not_comparable(self, version: str) -> None:
        line = self.redis_line(version)
        assert "(**older than 7.0: rates differ from a 7.x run's" in line
        assert "set REDIS_SERVER to choose the binary**)" in line


FIGURES = {"peer-taskq-drain": 9_000.0, "peer-best-drain": 2_000.0,
           "peer-taskq-drain-incr": 3_000.0, "peer-best-drain-incr": 2_000.0}


class TestTargets:

    def test_a_reference_row_is_shown_with_its_factor_but_never_judged(self) -> None:
        from bench import targets  # noqa: PLC0415

        judged, missed = targets.section(FIGURES, {})
        incr = next(row for row in judged.rows if "Redis INCR" in row[0])
        assert incr[3:] == ["0.50", "reference"]
        assert not missed

    def test_the_tally_counted_drain_is_judged_on_the_interleaved_rounds_median_ratio(
        self
    ) -> None:
        from bench import targets  # noqa: PLC0415

        judged, missed = targets.section(
            {**FIGURES, "peer-taskq-drain": 6_000.0, "tally-duel-ratio": 2.5,
             "tally-duel-taskq": 15_000.0, "tally-duel-best-peer": 6_100.0},
            {"tally-duel-taskq": "`taskq worker --processes 3 -c 16 --prefetch 112`",
             "tally-duel-best-peer": "Huey (3 processes)"})
        drain, table = judged.rows[0], judged.rows[1]
        assert "tally-file append" in drain[0] and "interleaved rounds" in drain[0]
        assert drain[1] == ("2.50x (`taskq worker --processes 3 -c 16 --prefetch 112` "
                            "15,000/s vs Huey (3 processes) 6,100/s, medians)")
        assert drain[3:] == ["0.83", "**missed**"]
        # The peers table's figures, taken minutes apart, are shown but judge nothing.
        assert "peers table" in table[0] and table[3:] == ["1.00", "reference"]
        assert missed

    def test_the_tally_counted_drain_is_met_from_three_times(self) -> None:
        from bench import targets  # noqa: PLC0415

        judged, missed = targets.section(
            {**FIGURES, "tally-duel-ratio": 3.0, "tally-duel-taskq": 15_000.0,
             "tally-duel-best-peer": 5_000.0}, {})
        assert judged.rows[0][3:] == ["1.00", "**met**"]
        assert not missed

    def test_the_def_handler_incr_drain_is_judged_on_the_interleaved_rounds_median_ratio(
        self
    ) -> None:
        from bench import targets  # noqa: PLC0415

        judged, missed = targets.section(
            {"drain-duel-ratio": 2.0, "drain-duel-taskq": 5_000.0,
             "drain-duel-best-peer": 2_400.0,
             "peer-taskq-drain-incr-def": 9_000.0, "peer-best-drain-incr": 3_000.0},
            {"drain-duel-taskq": "`taskq worker --processes 2 -c 64`",
             "drain-duel-best-peer": "Huey (2 processes)"})
        rows = [row for row in judged.rows if row[0].startswith("Drain, `def` handler")]
        assert rows[0][1] == ("2.00x (`taskq worker --processes 2 -c 64` 5,000/s vs "
                              "Huey (2 processes) 2,400/s, medians)")
        assert rows[0][2:] == [">= 2.5x", "0.80", "**missed**"]
        # The peers table's figures, taken minutes apart, are shown but judge nothing.
        assert rows[1][3:] == ["1.20", "reference"]
        assert missed

    def test_the_def_handler_incr_drain_is_met_from_two_and_a_half_times(self) -> None:
        from bench import targets  # noqa: PLC0415

        judged, missed = targets.section(
            {"drain-duel-ratio": 2.5, "drain-duel-taskq": 10_000.0,
             "drain-duel-best-peer": 4_000.0}, {})
        row = next(row for row in judged.rows if row[0].startswith("Drain, `def` handler"))
        assert row[3:] == ["1.00", "**met**"]
        assert not missed

    def test_the_async_handler_incr_drain_is_only_a_reference(self) -> None:
        from bench import targets  # noqa: PLC0415

        judged, missed = targets.section(
            {"peer-taskq-drain-incr-async": 2_500.0, "peer-best-drain-incr": 2_500.0}, {})
        row = next(row for row in judged.rows
                   if row[0].startswith("Drain, `async def` handler"))
        assert row[3:] == ["0.40", "reference"]
        assert not missed

    @pytest.mark.parametrize(("taskq", "verdict"), [(6_000.0, "**met**"),
                                                    (5_900.0, "**missed**")])
    def test_single_call_enqueue_needs_a_fifth_more_than_the_fastest_peer(
        self, taskq: float, verdict: str
    ) -> None:
        from bench import targets  # noqa: PLC0415

        judged, _ = targets.section({"duel-taskq": taskq, "duel-best-peer": 5_000.0},
                                    {"duel-best-peer": "Huey"})
        row = next(row for row in judged.rows if row[0].startswith("Single-call enqueue"))
        assert row[1].endswith("(taskq " + f"{taskq:,.0f}/s vs Huey 5,000/s)")
        assert row[2] == ">= 1.2x" and row[4] == verdict

    def test_memory_within_its_factor_of_the_peer_keeping_the_same_facts_is_met(self) -> None:
        from bench import targets  # noqa: PLC0415

        judged, missed = targets.section({"memory-taskq-ready": 900.0,
                                          "memory-peer-ready": 750.0},
                                         {"memory-peer-ready": "RQ"})
        row = next(row for row in judged.rows if "leanest peer keeping" in row[0])
        assert row[1] == "1.20x (taskq 900 B vs RQ 750 B)"
        assert row[3:] == ["1.25", "**met**"]
        assert not missed

    def test_memory_past_its_factor_is_missed(self) -> None:
        from bench import targets  # noqa: PLC0415

        judged, missed = targets.section({"memory-taskq-ready": 1_500.0,
                                          "memory-peer-ready": 500.0}, {})
        row = next(row for row in judged.rows if "leanest peer keeping" in row[0])
        assert row[3:] == ["0.50", "**missed**"]
        assert missed


class TestShards:

    def test_each_run_ranks_the_primaries_busiest_first_so_medians_keep_the_busy_one(
        self
    ) -> None:
        from bench.harness import Stat  # noqa: PLC0415
        from bench.shards import ShardedDrain  # noqa: PLC0415

        # One slot lands on another primary in each run.
        runs = [ShardedDrain(1.0, (40.0, 1.0, 2.0)), ShardedDrain(1.0, (1.0, 42.0, 1.0)),
                ShardedDrain(1.0, (2.0, 1.0, 38.0))]
        ranks = [Stat() for _ in range(3)]
        for run in runs:
            for stat, us in zip(ranks, run.busiest_first(), strict=True):
                stat.add(us)
        assert [stat.median for stat in ranks] == [40.0, 2.0, 1.0]


class TestMemory:
    """The memory bench's arithmetic."""

    def test_a_full_event_log_adds_its_retention_whatever_the_tasks(self) -> None:
        from bench.memory import sizing_bytes  # noqa: PLC0415

        assert sizing_bytes(1_000_000, 100_000, 600.0, 120.0) == 612_000_000
        assert sizing_bytes(0, 100_000, 600.0, 120.0) == 12_000_000

    def test_facts_are_named_in_one_order_or_as_none(self) -> None:
        from bench.memory import facts_text  # noqa: PLC0415

        assert facts_text(frozenset({"times", "state"})) == "state, times"
        assert facts_text(frozenset()) == "none"

    def test_bytes_per_task_is_the_growth_over_the_tasks(self) -> None:
        from bench.harness import per_task  # noqa: PLC0415

        assert per_task(1_000, 51_000, 100) == 500.0


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


class TestMemorySettings:
    """The server setting the memory bench raises for one of its rows."""

    def test_the_hash_setting_is_raised_for_the_block_and_restored_on_any_redis(
        self, client: redis.Redis
    ) -> None:
        from bench.memory import listpack_values  # noqa: PLC0415

        # Redis 7 knows both names (the older as an alias); 6.2 only the ziplist one.
        name = "hash-max-ziplist-value"
        before = client.config_get(name)[name]
        with listpack_values(client, 300):
            assert client.config_get(name)[name] == "300"
        assert client.config_get(name)[name] == before


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
                               r"((?:[\d.]+ / [\d.]+(?:, )?)+)\.", report)
            assert speeds is not None, report
            # Three rounds, each a pair of slowdowns of at least full speed.
            pairs = speeds.group(1).split(", ")
            assert len(pairs) == 3, pairs
            assert all(float(x) >= 1.0 for pair in pairs for x in pair.split(" / ")), pairs
        else:
            assert "**not run**" in report and "not measured in this run" in row, row
        assert "FAILED" not in report


class TestPeerFigures:

    def test_each_figure_keeps_the_best_drain_and_the_command_that_reached_it(self) -> None:
        from bench.harness import Section  # noqa: PLC0415
        from bench.peers.driver import _keep_best  # noqa: PLC0415

        section = Section("peers", "", [])
        _keep_best(section, "peer-taskq-drain-incr-def", 4_000.0, "`taskq worker -c 16`",
                   (1, 16, 0))
        _keep_best(section, "peer-taskq-drain-incr-def", 5_000.0,
                   "`taskq worker --processes 2 -c 8 --prefetch 24`", (2, 8, 24))
        _keep_best(section, "peer-taskq-drain-incr-def", 4_500.0, "`taskq worker -c 64`",
                   (1, 64, 0))
        assert section.figures == {"peer-taskq-drain-incr-def": 5_000.0,
                                   "peer-taskq-drain-incr-def-processes": 2,
                                   "peer-taskq-drain-incr-def-concurrency": 8,
                                   "peer-taskq-drain-incr-def-prefetch": 24}
        assert section.labels == {
            "peer-taskq-drain-incr-def": "`taskq worker --processes 2 -c 8 --prefetch 24`"}


class TestProfile:
    """Reading py-spy's frames."""

    @pytest.mark.parametrize(("label", "handler"), [
        ("_counted.<locals>.tally_async (/work/repo/bench/tasks.py)", True),
        ("make_app.<locals>.tally_async (bench/tasks.py)", True),
        ("tally_async (/work/repo/bench/other.py)", False),
        ("_counted.<locals>.tally_sync (/work/repo/bench/tasks.py)", False),
        ("tick (/work/repo/bench/tally.py)", False),
    ])
    def test_the_handler_is_found_by_its_name_in_bench_tasks_wherever_it_is_defined(
        self, label: str, handler: bool
    ) -> None:
        from bench.profile import is_bench_handler  # noqa: PLC0415

        assert is_bench_handler(label, "tally_async") is handler


class TestIncrProfile:
    """The `def` INCR profile's arithmetic and its reading of processes and samples."""

    def test_a_window_costs_each_task_its_share_of_the_cpu_between_the_marks(self) -> None:
        from bench.cpu_drain import Usage, Window  # noqa: PLC0415

        measured = Window(Usage(10.0, 1.0, 5.0, 100, 3), Usage(12.0, 1.5, 5.2, 2_100, 3))
        assert measured.tasks == 2_000
        assert measured.rate == 1_000.0
        assert measured.tree_us == pytest.approx(250.0)
        assert measured.redis_us == pytest.approx(100.0)

    def test_the_floor_is_the_cores_over_both_sides_or_redis_s_one_thread(self) -> None:
        from bench.incr_floor import CORES, Floor  # noqa: PLC0415

        assert Floor(1.0, 60.0, 20.0).cap == min(CORES * 1e6 / 80.0, 50_000.0)
        assert Floor(1.0, 0.0, 100.0).cap == 10_000.0

    @pytest.mark.parametrize(("incr_us", "verdict"), [
        (50.0, "which leaves 10.0 µs a task for everything the worker processes do, where "
               "the no-op drain's spend 30.0 µs, and handler threads sharing a GIL add "
               "30.0 µs to the INCR"),
        (70.0, "more than that: no worker can reach it with this Redis work"),
    ])
    def test_a_task_s_cost_is_taken_apart_and_held_against_the_target_s_budget(
        self, incr_us: float, verdict: str
    ) -> None:
        from bench.harness import Section  # noqa: PLC0415
        from bench.incr_floor import CORES, Floor  # noqa: PLC0415
        from bench.profile_incr import Parts, _floor_note  # noqa: PLC0415

        parts = Parts(drain_us=170.0, queue_us=70.0, queue_redis_us=40.0, script_us=45.0,
                      incr_us=incr_us + 30.0)
        assert parts.hand_offs_us == 70.0 - incr_us
        # A peer whose rate 2.5x over leaves each task 100 µs of the machine's cores.
        peer_rate = CORES * 1e6 / 100.0 / 2.5
        section = Section("profile-incr", "", [])
        _floor_note(section, Floor(1.0, 80.0, 40.0), Floor(1.0, incr_us - 20.0, 20.0), parts,
                    ("Huey (3 processes)", peer_rate))
        assert section.figures["profile-incr-budget-us"] == pytest.approx(100.0, rel=1e-3)
        assert verdict in section.notes[0], section.notes[0]

    @pytest.mark.parametrize(("queue_us", "said"), [
        (40.0, "the rest, 30.0 µs, is what the two cost more together than apart"),
        (65.0, "come to the drain's cost within this machine's noise (+5.0 µs)"),
        (100.0, "together they cost 30.0 µs less than apart"),
    ])
    def test_what_the_parts_leave_is_said_as_what_it_is(self, queue_us: float,
                                                         said: str) -> None:
        from bench.profile_incr import Parts, _rest  # noqa: PLC0415

        assert said in _rest(Parts(drain_us=170.0, queue_us=queue_us, queue_redis_us=40.0,
                                   script_us=45.0, incr_us=100.0))

    def test_samples_are_split_between_the_handler_redis_py_under_it_and_taskq(
        self
    ) -> None:
        from bench.profile_incr import gil_shares  # noqa: PLC0415

        frames = [{"name": "Worker.run", "file": "/w/src/taskq/worker/loop.py"},
                  {"name": "_counted.<locals>.count_sync", "file": "/w/bench/tasks.py"},
                  {"name": "Redis.execute_command",
                   "file": "/v/lib/python3.11/site-packages/redis/client.py"},
                  {"name": "Thread.run", "file": "/usr/lib/python3.11/threading.py"},
                  {"name": "Runner.run", "file": "/w/src/taskq/worker/runner.py"}]
        speedscope = {"shared": {"frames": frames}, "profiles": [
            {"name": 'Process 1 Thread 2 "handler"', "type": "sampled", "unit": "none",
             "samples": [[3, 4, 1, 2], [3, 4, 1], [3, 4, 1, 2], [3]],
             "weights": [1, 1, 1, 1]},
            {"name": 'Process 5 Thread 6 "MainThread"', "type": "sampled", "unit": "none",
             "samples": [[0, 2], [0]], "weights": [2, 1]},
        ]}
        total, parts = gil_shares(speedscope)
        assert total == 7
        assert parts == {"redis-py": 2, "handler": 1, "taskq": 3, "other": 1}

    @pytest.mark.processes
    def test_a_tree_holds_descendants_started_in_sessions_of_their_own(self) -> None:
        from bench.cpu_drain import tree_cpu_seconds  # noqa: PLC0415

        script = ("import subprocess, sys, time\n"
                  "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],"
                  " start_new_session=True)\n"
                  "busy = time.process_time() + 0.05\n"
                  "while time.process_time() < busy: pass\n"
                  "print(p.pid, flush=True)\n"
                  "time.sleep(60)\n")
        child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                                 text=True, start_new_session=True)
        assert child.stdout is not None
        grandchild = int(child.stdout.readline())
        try:
            seconds, alive = tree_cpu_seconds(child.pid)
            assert alive == 2
            assert seconds >= 0.04  # the child's busy loop, at least, however ticks fall
        finally:
            for pid in (grandchild, child.pid):
                os.kill(pid, signal.SIGKILL)
            child.wait()
            child.stdout.close()

    def test_the_fastest_peer_of_the_run_is_profiled_or_else_every_fast_one(self) -> None:
        from bench.peers.driver import FAST  # noqa: PLC0415
        from bench.profile_incr import peer_candidates  # noqa: PLC0415

        chosen = peer_candidates({"peer-best-drain-incr": 3_000.0},
                                 {"peer-best-drain-incr": "Huey (2 processes)"})
        assert [(p.name, c.label) for p, c in chosen] == [("huey", "2 processes")]
        every = peer_candidates({}, {})
        assert {p.name for p, _ in every} == {"dramatiq", "huey", "taskiq"}
        assert all(c.scale == FAST for _, c in every)
