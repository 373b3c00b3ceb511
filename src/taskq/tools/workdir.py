"""The directory a demo or chaos run writes its logs, ledger and Redis data to: emptied
for each run, and so never one that holds anything taskq did not write there."""

from __future__ import annotations

import shutil
from pathlib import Path

from taskq.errors import ConfigError

# Written into every work directory a run makes. Only a directory holding it is emptied
# for the next run: `--dir .` or `--dir ~` is refused, not wiped.
MARK = ".taskq-workdir"
MARK_TEXT = "made by taskq for a demo or chaos run; emptied by the next one\n"


def fresh_workdir(path: Path, option: str = "--dir") -> Path:
    """`path` as an empty work directory, marked as taskq's: made if it is missing,
    emptied if an earlier run made it; `ConfigError` naming `option` if it holds
    anything else, is not a directory, or cannot be made."""
    try:
        if path.exists():
            if not path.is_dir():
                raise ConfigError(f"{option} {str(path)!r} is not a directory")
            if (path / MARK).is_file():
                shutil.rmtree(path)
            elif any(path.iterdir()):
                raise ConfigError(
                    f"{option} {str(path)!r} holds files a taskq run did not write (it "
                    f"has no {MARK}): give a new or empty directory, which each run "
                    "then empties for the next")
        path.mkdir(parents=True, exist_ok=True)
        (path / MARK).write_text(MARK_TEXT)
    except OSError as e:
        raise ConfigError(f"{option} {str(path)!r}: cannot make it the run's work "
                          f"directory: {e.strerror or e}") from e
    return path
