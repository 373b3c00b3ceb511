"""The bench's profiles: where a task's CPU goes (bench/profile.py,
bench/profile_incr.py, bench/cpu_drain.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest


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
