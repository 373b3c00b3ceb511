r"""Python transcription of ResultWait.tla and its two mutants.

TLA+                              taskq                                Python
--------------------------------  -----------------------------------  --------------------
Init                              a running task, nobody watched yet    initial(c)
End("completed"), End("dead")     ack.lua; fail.lua or reap.lua to the  end("completed"),
                                  DLQ; each calls wake_waiters          end("dead")
ReviveWith(clear), Revive         retry_dead.lua (DEL done)             revive_with, revive
Recreate                          the record expires, the id is         recreate(c, s)
                                  enqueued again
Watch(w)                          watch.lua with mark = '1'             watch(c, s): Watch/ended,
                                                                        Watch/marked
Block(w)                          BLMOVE done done, one slice           block(c, s): /returned,
                                                                        /blocked
Wake(w)                           a push serves the blocked BLMOVE      wake(c, s)
Timeout(w)                        the slice runs out (SLICE)            timeout(c, s)
Next                              NEXT, tried in that order
TypeOK, NoLostWakeup, ..          the INVARIANTS table, under the TLA+ names
AllReturn                         an EndProperty ([](~ENABLED Next => AllReturned))

ResultWaitSplitWatch.tla          watch as two calls                    read(c, s), mark(c, s),
                                                                        SPLIT_WATCH_NEXT
ResultWaitKeepDone.tla            retry_dead without DEL done           keep_done_revive,
                                                                        KEEP_DONE_NEXT
CLEAR_ON_MARK = FALSE             watch.lua's first mark keeps the      Constants.clear_on_mark
                                  done list

Each \E w is a loop over the producers in ascending order and Next's disjuncts are
tried in the order written, which is TLC's order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from specs.tlacheck import EndProperty, Fn, Model, Transition
from specs.tlacheck import cfg as cfgs
from specs.tlacheck.model import Property

STATES = ("running", "completed", "dead")
PCS = ("watch", "block", "blocked", "returned")


class State(NamedTuple):
    # Field names are the TLA+ variable names, so that traces read like TLC's.
    state: str
    revivals: int
    waiters: bool
    done: int
    pc: Fn[int, str]
    run: int
    seen: Fn[int, int]


@dataclass(frozen=True)
class Constants:
    waiters: int
    max_revivals: int
    slice: bool
    max_recreates: int = 0
    clear_on_mark: bool = True

    @classmethod
    def from_cfg(cls, cfg: cfgs.Config) -> Constants:
        flags = {name: cfg.constants.get(name) for name in ("SLICE", "CLEAR_ON_MARK")}
        for name, flag in flags.items():
            if not isinstance(flag, bool):
                raise cfgs.ConfigError(f"{cfg.source}: {name} must be TRUE or FALSE, "
                                       f"not {flag!r}")
        return cls(
            waiters=cfg.int_constant("WAITERS"),
            max_revivals=cfg.int_constant("MAX_REVIVALS"),
            slice=bool(flags["SLICE"]),
            max_recreates=cfg.int_constant("MAX_RECREATES"),
            clear_on_mark=bool(flags["CLEAR_ON_MARK"]),
        )

    @property
    def producers(self) -> range:
        """Waiters == 1..WAITERS."""
        return range(1, self.waiters + 1)


def initial(c: Constants) -> State:
    return State("running", 0, False, 0, Fn.const(c.producers, "watch"), 0,
                 Fn.const(c.producers, 0))


def ended(s: State) -> bool:
    return s.state != "running"


Action = Callable[[Constants, State], Iterator[Transition[State]]]


def end(to: str) -> Action:
    """End(to): the task ends, and a marked record gets one element pushed onto done."""

    def action(_: Constants, s: State) -> Iterator[Transition[State]]:
        if s.state == "running":
            yield f"End(to={to})", s._replace(state=to, done=s.done + 1 if s.waiters else s.done)

    return action


def revive_with(name: str, clear: bool) -> Action:
    """ReviveWith(clear): retry_dead.lua, deleting the done list when `clear`."""

    def action(c: Constants, s: State) -> Iterator[Transition[State]]:
        if s.state == "dead" and s.revivals < c.max_revivals:
            yield (
                name,
                s._replace(state="running", revivals=s.revivals + 1, done=0 if clear else s.done),
            )

    return action


revive = revive_with("Revive", clear=True)
keep_done_revive = revive_with("KeepDoneRevive", clear=False)


def recreate(c: Constants, s: State) -> Iterator[Transition[State]]:
    """Recreate: the ended task's record goes, its id is enqueued again, unmarked."""
    if ended(s) and s.run < c.max_recreates:
        yield "Recreate", s._replace(state="running", waiters=False, run=s.run + 1)


def watch(c: Constants, s: State) -> Iterator[Transition[State]]:
    for w in c.producers:
        if s.pc[w] != "watch":
            continue
        if ended(s):
            yield f"Watch(w={w})/ended", s._replace(pc=s.pc.except_(w, "returned"))
        else:
            done = 0 if c.clear_on_mark and not s.waiters else s.done
            yield f"Watch(w={w})/marked", s._replace(pc=s.pc.except_(w, "block"), waiters=True,
                                                     done=done, seen=s.seen.except_(w, s.run))


def block(c: Constants, s: State) -> Iterator[Transition[State]]:
    for w in c.producers:
        if s.pc[w] == "block":
            if s.done > 0:
                yield f"Block(w={w})/returned", s._replace(pc=s.pc.except_(w, "watch"))
            else:
                yield f"Block(w={w})/blocked", s._replace(pc=s.pc.except_(w, "blocked"))


def wake(c: Constants, s: State) -> Iterator[Transition[State]]:
    for w in c.producers:
        if s.pc[w] == "blocked" and s.done > 0:
            yield f"Wake(w={w})", s._replace(pc=s.pc.except_(w, "watch"))


def timeout(c: Constants, s: State) -> Iterator[Transition[State]]:
    if not c.slice:
        return
    for w in c.producers:
        if s.pc[w] == "blocked" and s.done == 0:
            yield f"Timeout(w={w})", s._replace(pc=s.pc.except_(w, "watch"))


def read(c: Constants, s: State) -> Iterator[Transition[State]]:
    """Read(w), the split watch's first call: the state only, no mark."""
    for w in c.producers:
        if s.pc[w] == "watch":
            yield f"Read(w={w})", s._replace(pc=s.pc.except_(w, "returned" if ended(s) else "mark"))


def mark(c: Constants, s: State) -> Iterator[Transition[State]]:
    """Mark(w), the split watch's second call: the flag, whatever happened since the read."""
    for w in c.producers:
        if s.pc[w] == "mark":
            yield f"Mark(w={w})", s._replace(pc=s.pc.except_(w, "block"), waiters=True,
                                             seen=s.seen.except_(w, s.run))


NEXT: tuple[Action, ...] = (
    end("completed"), end("dead"), revive, recreate, watch, block, wake, timeout,
)  # fmt: skip
SPLIT_WATCH_NEXT: tuple[Action, ...] = (
    end("completed"), end("dead"), revive, read, mark, block, wake, timeout,
)  # fmt: skip
KEEP_DONE_NEXT: tuple[Action, ...] = (
    end("completed"), end("dead"), keep_done_revive, watch, block, wake, timeout,
)  # fmt: skip


def type_ok(c: Constants, s: State, pcs: tuple[str, ...] = PCS) -> bool:
    return (
        s.state in STATES
        and 0 <= s.revivals <= c.max_revivals
        and 0 <= s.done <= c.max_revivals + c.max_recreates + 1
        and set(s.pc) == set(c.producers)
        and all(s.pc[w] in pcs for w in c.producers)
        and 0 <= s.run <= c.max_recreates
        and all(0 <= s.seen[w] <= c.max_recreates for w in c.producers)
    )


def waiting(s: State, w: int) -> bool:
    """Waiting(w): about to block or blocked, having last watched the task running."""
    return s.pc[w] in ("block", "blocked")


def no_lost_wakeup(s: State) -> bool:
    return all(s.done > 0 for w in s.pc if waiting(s, w) and ended(s) and s.seen[w] == s.run)


def no_spurious_spin(s: State) -> bool:
    return all(s.done == 0 for w in s.pc
               if waiting(s, w) and not ended(s) and s.seen[w] == s.run)


def all_returned(s: State) -> bool:
    return all(p == "returned" for p in s.pc.values())


def invariants(c: Constants) -> dict[str, Callable[[State], bool]]:
    return {
        "TypeOK": lambda s: type_ok(c, s),
        "SplitTypeOK": lambda s: type_ok(c, s, (*PCS, "mark")),
        "NoLostWakeup": no_lost_wakeup,
        "NoSpuriousSpin": no_spurious_spin,
    }


PROPERTIES: dict[str, Property[State]] = {
    name: EndProperty(name, all_returned)
    for name in ("AllReturn", "SplitAllReturn", "KeepDoneAllReturn")
}


def model(cfg: cfgs.Config) -> Model[State]:
    return _model("ResultWait", NEXT, cfg)


def split_watch_model(cfg: cfgs.Config) -> Model[State]:
    return _model("ResultWaitSplitWatch", SPLIT_WATCH_NEXT, cfg)


def keep_done_model(cfg: cfgs.Config) -> Model[State]:
    return _model("ResultWaitKeepDone", KEEP_DONE_NEXT, cfg)


def _model(name: str, actions: tuple[Action, ...], cfg: cfgs.Config) -> Model[State]:
    c = Constants.from_cfg(cfg)
    return cfgs.action_model(name, cfg, c, initial(c), actions, invariants(c), PROPERTIES)
