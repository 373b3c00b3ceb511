"""`python -m bench.instructions`: the instructions a task costs Redis and a worker, and a
single-task enqueue Redis and its producer, counted by callgrind over exactly a drain that
completed every task and calls that made every task, or the count fails."""

from __future__ import annotations

import re
import shutil
import subprocess
from typing import Any

import pytest
from bench import instructions

from taskq import Broker

needs_valgrind = pytest.mark.skipif(shutil.which("valgrind") is None,
                                    reason="valgrind is not installed")


@needs_valgrind
def test_a_small_count_against_a_commit_prints_both_sides_and_their_ratios(
    capsys: pytest.CaptureFixture[str],
) -> None:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=instructions.ROOT,
                          capture_output=True, text=True, check=True).stdout.strip()
    assert instructions.main(["--tasks", "60", "--against", "HEAD"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # HEAD's tree and this one (HEAD too, "-dirty" while it has changes), for each
    # pair of sides.
    counted = [line for line in lines if re.match(f"{head}(-dirty)?: ", line)]
    assert len(counted) == 4, lines
    drain, enqueue = (figures(line) for line in (counted[0], counted[2]))
    redis_ir, worker_ir, both = drain
    # A task costs each side thousands of instructions at the least: a count of the
    # wrong window (nothing counted, or start-up counted) would not read so.
    assert 10_000 < redis_ir < 5_000_000 and 10_000 < worker_ir < 50_000_000
    assert abs(both - (redis_ir + worker_ir)) <= 1  # each rounded on its own
    # A call of one task: Redis runs the script, the producer builds, sends and reads it.
    redis_ir, producer_ir, both = enqueue
    assert 10_000 < redis_ir < 5_000_000 and 10_000 < producer_ir < 5_000_000
    assert abs(both - (redis_ir + producer_ir)) <= 1
    ratios = [line for line in lines if re.match(f"{head}(-dirty)? / {head}: ", line)]
    assert re.fullmatch(r".*: redis \d\.\d{3}  worker \d\.\d{3}  both \d\.\d{3}",
                        ratios[0]), ratios
    assert re.fullmatch(r".*: redis \d\.\d{3}  producer \d\.\d{3}  both \d\.\d{3}",
                        ratios[1]), ratios


def figures(line: str) -> list[int]:
    """The whole numbers a count's line gives after its tree's name."""
    return [int(f.replace(",", "")) for f in re.findall(r"(\d[\d,]*)", line.split(": ", 1)[1])]


@needs_valgrind
def test_a_count_whose_acks_were_refused_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    def stale(self: Broker, held: list[tuple[str, int]], *args: object,
              **kwargs: object) -> object:
        return original(self, [(task_id, token + 1) for task_id, token in held],
                        *args, **kwargs)

    original = Broker.ack_and_lease
    monkeypatch.setattr(Broker, "ack_and_lease", stale)
    with pytest.raises(instructions.CountError, match="an ack was refused"):
        instructions.count_redis(20)


@needs_valgrind
def test_an_enqueue_count_whose_calls_made_no_task_fails(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def one_id(self: Broker, task_id: str, *args: Any, **kwargs: Any) -> Any:
        return original(self, "always-this-one", *args, **kwargs)

    original = Broker.enqueue
    monkeypatch.setattr(Broker, "enqueue", one_id)
    with pytest.raises(instructions.CountError, match="0 tasks made of 20"):
        instructions.count_enqueue_redis(20)


def test_fewer_than_one_task_is_refused_before_anything_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        instructions.main(["--tasks", "0"])
    assert "--tasks must be at least 1" in capsys.readouterr().err
