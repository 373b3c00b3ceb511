"""The bench harness runs end to end and writes its report (a smoke run, tiny N); its
machine facts and its target verdicts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench_support import run_bench


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
        report = run_bench("--only", "ceiling", "--n", "4000", out=tmp_path / "bench.md")
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
        # Each primary's idle work (cluster bus, cron) counts alike on all three, so the
        # shares are judged within a layout: the three-shard layout does more work in
        # all (more round trips, smaller batches on a loaded machine), so its busiest
        # primary may do as much as the one slot's. One slot: its primary does more
        # than the other two together; three shards: each does a share.
        busiest, *others = one
        assert busiest > sum(others), one
        assert min(three) > max(three) / 3, three
        assert "FAILED" not in report

    @pytest.mark.processes
    def test_a_tiny_results_run_times_result_and_its_cost(self, tmp_path: Path) -> None:
        # Drains of 2,000: the count moves a batch of acks at a time, so a drain of 600
        # can go from under its 5% mark to done between two polls, and the bench then
        # refuses to time it.
        report = run_bench("--only", "results", "--n", "4000", out=tmp_path / "bench.md")
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
        # The starts past the burst, by their Redis times, from the first to the last:
        # the limit itself bounds them (a run over it in any window is FAILED below).
        assert 0 < share <= 1, row
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
            run_drain(server, plan, extra_checks=lambda _: count.check(server, 2000))
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
