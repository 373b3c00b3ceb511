"""What cancelling costs behind a backlog: a workflow's pending steps (or one task)
cancelled while BACKLOG other tasks wait in ready. Each cancel takes its task out of a
list; that should cost the tasks pushed after it, not the whole backlog, since Redis
runs nothing else meanwhile (heartbeats wait, leases run out). Then a workflow of
BEHIND pending steps with AFTER tasks pushed after it: its steps should cost one walk of
the list, not one walk each of the tasks pushed after them.

`python -m bench.cancel_backlog [BACKLOG [BEHIND AFTER]]` prints the figures."""

from __future__ import annotations

import sys
import time

from bench.harness import BenchError, Server
from taskq import App, group
from taskq.settings import Settings


def main(backlog: int = 200_000, behind: int = 5_000, after: int = 40_000) -> None:
    server = Server()
    try:
        app = App(queue="cancels", settings=Settings.from_env({}, redis_url=server.url,
                                                               redis_url_given=True))

        @app.task("add")
        def add(x: int, y: int = 1) -> int:
            return x + y

        add.enqueue_many([add.call(i) for i in range(backlog)], 10_000)
        print(f"redis {server.version}, {backlog:,} tasks waiting in ready")
        for steps in (1, 100, 1000):
            flow = group(*(add.s(i) for i in range(steps))).enqueue()
            began = time.perf_counter()
            done = flow.cancel()
            took = time.perf_counter() - began
            if (done.outcome, done.ended) != ("cancelled", steps):
                raise BenchError(f"a cancel of {steps} pending steps was {done.outcome} "
                                 f"and ended {done.ended}: its time is no cancel's")
            print(f"  a workflow of {steps:>5,} pending steps: cancel {done.outcome}, "
                  f"{done.ended:,} ended, in {took * 1000:,.1f} ms")
        # The next to be leased lies at the far end from where tasks are pushed.
        for which, end in (("the newest", 0), ("the oldest", -1)):
            task_id = str(server.client.lindex(app.broker.keys.ready, end))
            began = time.perf_counter()
            outcome = app.broker.cancel(task_id).outcome
            if outcome != "cancelled":
                raise BenchError(f"the cancel of {which} waiting task was {outcome}")
            print(f"  {which} waiting task: cancel {outcome} in "
                  f"{(time.perf_counter() - began) * 1000:,.1f} ms")
        server.flush()
        flow = group(*(add.s(i) for i in range(behind))).enqueue()
        add.enqueue_many([add.call(i) for i in range(after)], 10_000)
        began = time.perf_counter()
        done = flow.cancel()
        took = time.perf_counter() - began
        if (done.outcome, done.ended) != ("cancelled", behind):
            raise BenchError(f"a cancel of {behind} pending steps behind {after} tasks "
                             f"was {done.outcome} and ended {done.ended}: its time is no "
                             "cancel's")
        print(f"  a workflow of {behind:,} pending steps with {after:,} tasks pushed after "
              f"it: cancel {done.outcome}, {done.ended:,} ended, in {took * 1000:,.1f} ms")
    finally:
        server.close()


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:4]))
