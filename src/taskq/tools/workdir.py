"""The directory a demo or chaos run writes its logs, ledger and Redis data to: emptied
for each run, and so never one that holds anything taskq did not write there, nor one
a run is still using."""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path
from typing import BinaryIO

from taskq.errors import ConfigError

# Written into every work directory a run makes. Only a directory holding it is emptied
# for the next run: `--dir .` or `--dir ~` is refused, not wiped.
MARK = ".taskq-workdir"
MARK_TEXT = "made by taskq for a demo or chaos run; emptied by the next one\n"

# The file a redis-server's data directory holds locked while it runs (see
# taskq.tools.embedded): one below a work directory keeps it from being emptied.
SERVER_LOCK = "redis.lock"

# The marks this process's runs hold locked, by directory, for as long as it lives.
_HELD: dict[Path, BinaryIO] = {}


def try_lock(path: Path) -> BinaryIO | None:
    """`path` (made if missing) opened and locked (flock, exclusive) for as long as the
    returned file stays open; None if another process holds it, or if the file was
    removed or replaced between the open and the lock (another run that emptied the
    directory meanwhile: the lock would be on a file no one else can see). The lock goes
    with the process however it ends."""
    handle = path.open("ab")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.fstat(handle.fileno()).st_ino != os.stat(path).st_ino:
            handle.close()
            return None
    except (BlockingIOError, FileNotFoundError):
        handle.close()
        return None
    return handle


def fresh_workdir(path: Path, option: str = "--dir") -> Path:
    """`path` as an empty work directory, marked as taskq's and locked for as long as
    this process lives: made if it is missing, emptied if an earlier run made it and
    has ended; `ConfigError` naming `option` if a run still uses it, it holds anything
    else, is not a directory, or cannot be made."""
    try:
        path = path.resolve()
        held = _HELD.pop(path, None)
        if path.exists():
            if not path.is_dir():
                raise ConfigError(f"{option} {str(path)!r} is not a directory")
            if (path / MARK).is_file():
                held = held or try_lock(path / MARK)
                if held is None:
                    raise ConfigError(f"{option} {str(path)!r} is in use by a run that is "
                                      "still going: wait for it, or give another directory")
                servers = _servers_stopped(path, option, held)
                shutil.rmtree(path)
                for taken in (*servers, held):
                    taken.close()
            elif any(path.iterdir()):
                raise ConfigError(
                    f"{option} {str(path)!r} holds files a taskq run did not write (it "
                    f"has no {MARK}): give a new or empty directory, which each run "
                    "then empties for the next")
        path.mkdir(parents=True, exist_ok=True)
        (path / MARK).write_text(MARK_TEXT)
        lock = try_lock(path / MARK)
        if lock is None:
            raise ConfigError(f"{option} {str(path)!r} was taken by another run as this one "
                              "began: give another directory")
        _HELD[path] = lock
    except OSError as e:
        raise ConfigError(f"{option} {str(path)!r}: cannot make it the run's work "
                          f"directory: {e.strerror or e}") from e
    return path


def _servers_stopped(path: Path, option: str, held: BinaryIO) -> list[BinaryIO]:
    """The locks of every redis-server data directory below `path`, taken (and `held`
    let go) so that none starts while the directory is emptied; `ConfigError` if a
    server still runs in one (`taskq redis --dir` inside it): emptied, its data would
    be lost."""
    locks: list[BinaryIO] = []
    for found in sorted(path.rglob(SERVER_LOCK)):
        if found.is_symlink() or not found.is_file():
            continue  # no server's lock (a FIFO would block the open for ever)
        lock = try_lock(found)
        if lock is None:
            for taken in (*locks, held):
                taken.close()
            raise ConfigError(
                f"{option} {str(path)!r} holds the data of a redis-server that still runs "
                f"(in {str(found.parent)!r}): stop it, or give another directory")
        locks.append(lock)
    return locks
