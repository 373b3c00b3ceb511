"""The work directory of a demo or chaos run: made fresh each run, emptied only when an
earlier run made it, and never a directory that holds anything else."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from taskq.errors import ConfigError
from taskq.tools import workdir
from taskq.tools.workdir import MARK, SERVER_LOCK, fresh_workdir, try_lock


def test_a_missing_directory_is_made_and_marked(tmp_path: Path) -> None:
    made = fresh_workdir(tmp_path / "a" / "run")
    assert made.is_dir() and [p.name for p in made.iterdir()] == [MARK]


def test_a_directory_an_earlier_run_made_is_emptied(tmp_path: Path) -> None:
    run = fresh_workdir(tmp_path / "run")
    (run / "redis").mkdir()
    (run / "redis" / "appendonly.aof").write_text("old")
    (run / "worker-1.log").write_text("old")
    fresh_workdir(run)
    assert [p.name for p in run.iterdir()] == [MARK]


def test_an_empty_directory_is_taken(tmp_path: Path) -> None:
    assert [p.name for p in fresh_workdir(tmp_path).iterdir()] == [MARK]


def test_a_directory_holding_other_files_is_refused_and_left_as_it_was(
    tmp_path: Path
) -> None:
    (tmp_path / "thesis.tex").write_text("years of work")
    (tmp_path / "src").mkdir()
    with pytest.raises(ConfigError, match=r"--dir '.+' holds files a taskq run did not "
                                          r"write \(it has no \.taskq-workdir\)"):
        fresh_workdir(tmp_path)
    assert (tmp_path / "thesis.tex").read_text() == "years of work"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src", "thesis.tex"]


def test_a_file_or_a_directory_that_cannot_be_made_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="is not a directory"):
        fresh_workdir(tmp_path / "file", "--dir")
    with pytest.raises(ConfigError, match="cannot make it the run's work directory: Not a "
                                          "directory"):
        fresh_workdir(tmp_path / "file" / "below")


def test_a_directory_a_run_in_another_process_still_uses_is_refused_and_kept(
    tmp_path: Path
) -> None:
    run = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; "
         "from taskq.tools.workdir import fresh_workdir; "
         f"fresh_workdir(Path({str(run)!r})); print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        (run / "ledger.db").write_text("a live run's")
        with pytest.raises(ConfigError, match="is in use by a run that is still going"):
            fresh_workdir(run)
        assert (run / "ledger.db").read_text() == "a live run's"
    finally:
        holder.kill()
        holder.communicate()
    assert [p.name for p in fresh_workdir(run).iterdir()] == [MARK]  # its run has ended


def test_a_directory_holding_a_running_redis_server_s_data_is_refused_and_kept(
    tmp_path: Path
) -> None:
    """`taskq redis --dir` inside a demo's directory: emptied, its AOF would be lost."""
    run = fresh_workdir(tmp_path / "run")
    data = run / "redis"
    data.mkdir()
    (data / "appendonly.aof").write_text("a live server's")
    server = try_lock(data / SERVER_LOCK)  # as a running EmbeddedRedis holds it
    assert server is not None
    with pytest.raises(ConfigError, match="holds the data of a redis-server that still runs"):
        fresh_workdir(run)
    assert (data / "appendonly.aof").read_text() == "a live server's"
    server.close()
    assert [p.name for p in fresh_workdir(run).iterdir()] == [MARK]  # once it has stopped


def test_a_fifo_named_as_a_server_s_lock_does_not_hold_the_run_up(tmp_path: Path) -> None:
    run = fresh_workdir(tmp_path / "run")
    os.mkfifo(run / SERVER_LOCK)  # opened to write, it would wait for a reader for ever
    assert [p.name for p in fresh_workdir(run).iterdir()] == [MARK]


def test_a_mark_replaced_between_its_open_and_its_lock_is_not_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another run that emptied the directory in between left this one locking a file no
    one else could see: both took the directory."""
    mark = tmp_path / "mark"
    real_flock = workdir.fcntl.flock

    def replaced_first(handle: Any, operation: int) -> None:
        mark.unlink()
        mark.write_text("the other run's")
        real_flock(handle, operation)

    monkeypatch.setattr(workdir.fcntl, "flock", replaced_first)
    assert workdir.try_lock(mark) is None
    monkeypatch.setattr(workdir.fcntl, "flock", real_flock)
    held = workdir.try_lock(mark)
    assert held is not None
    held.close()
