"""Shards, a queue spread over shards: its figures, what its state graph holds (every
task on the shard its id routes to, keys deduped, every branch reached, the turn bound
reached but never passed, work that stops only with every task ended), the shortest
trace that catches each mutant, and what ids that producers give do."""

from __future__ import annotations

import re
from collections.abc import Set as AbstractSet
from typing import Any

from specs.catalog import ROOT
from specs.Shards import shards as sh
from specs.tlacheck import Result
from specs.tlacheck import cfg as cfgs

import spec_runs
from spec_runs import catalogued, result, walk

Step = tuple[sh.State, str, sh.State]


def actions(found: Result[Any]) -> list[str | None]:
    assert found.violation is not None
    return [step.action for step in found.violation.trace][1:]


walk("Shards.tla", "Shards.cfg")
walk("Shards.tla", "Shards_Retry.cfg")


def steps(config: str = "Shards.cfg") -> AbstractSet[Step]:
    """Every step of Shards' state graph under `config`."""
    return spec_runs.steps("Shards.tla", config)


def build(config: str) -> Any:
    c = catalogued("Shards.tla", config)
    return c.build(cfgs.load(ROOT / c.config))


def constants(config: str = "Shards.cfg") -> sh.Constants:
    return sh.Constants.from_cfg(cfgs.load(ROOT / "Shards" / config))


def kind(label: str) -> str:
    """The action and its branch, without the bindings: `Turn/leased`."""
    return re.sub(r"\(.*?\)", "", label)


def progress(s: sh.State) -> tuple[int, int, int, int]:
    """Tokens and tries only grow; then created tasks, ended tasks, idle workers."""
    return (sum(sum(f.values()) for f in (*s.token.values(), *s.tries.values())),
            len(s.created),
            sum(len(e) for e in s.ended.values()),
            sum(h == sh.IDLE for h in s.held.values()))


def bindings(label: str) -> list[int]:
    """The values of a label's \\E bindings, in order: `Reap(s=1,i=3)` -> [1, 3]."""
    return [int(n) for n in re.findall(r"=(\d+)", label)]


def idle_step(label: str) -> bool:
    """A step that does no work: a turn that found every shard empty, or a send that
    created nothing."""
    return kind(label) in ("Turn/empty", "Send/duplicate")


def replay(model: Any, labels: list[str]) -> list[sh.State]:
    """The states of the behaviour that takes the steps labelled `labels` in order."""
    states = [model.init[0]]
    for label in labels:
        states.append(next(t for name, t in model.next(states[-1]) if name == label))
    return states


class TestShards:
    def test_every_check_holds_in_all_14620_states_and_with_a_retry_in_7904(self) -> None:
        found = result("Shards.tla", "Shards.cfg")
        assert found.ok
        assert (found.distinct, found.generated, found.depth, found.queued) == (
            14620, 44161, 14, 0)
        retried = result("Shards.tla", "Shards_Retry.cfg")
        assert retried.ok
        assert (retried.distinct, retried.generated, retried.depth, retried.queued) == (
            7904, 13817, 23, 0)

    def test_every_branch_of_every_action_is_taken(self) -> None:
        assert {kind(label) for _, label, _ in steps()} == {
            "Send/created", "Send/duplicate", "Turn/leased", "Turn/empty", "Ack/acked",
            "Ack/stale", "Reap/dead"}
        assert {kind(label) for _, label, _ in steps("Shards_Retry.cfg")} >= {
            "Reap/retried", "Ack/stale"}

    def test_every_task_lives_on_its_ids_shard_and_a_keyed_one_on_its_keys_too(
        self,
    ) -> None:
        # Layout.new_id draws ids that route with their key, so the handle's first
        # look finds every task; the key's shard is the same one.
        c = constants()
        for _, _, t in steps():
            for shard in c.all_shards:
                assert all(sh.id_shard(c, i) == shard for i in sh.records(t, shard))
                assert all(sh.key_shard(c, k) == shard
                           for k, i in t.keyed[shard].items() if i != sh.NONE)

    def test_a_second_send_with_a_key_is_answered_by_its_shard_and_creates_nothing(
        self,
    ) -> None:
        duplicates = [(s, label, t) for s, label, t in steps()
                      if kind(label) == "Send/duplicate"]
        assert duplicates
        assert all(s == t and not label.endswith("k=0)/duplicate")
                   for s, label, t in duplicates)

    def test_both_shards_hold_tasks_at_once_and_both_are_leased_from(self) -> None:
        assert any(all(t.ready.values()) for _, _, t in steps())
        assert {t.held[bindings(label)[0]][0] for _, label, t in steps()
                if kind(label) == "Turn/leased"} == {1, 2}

    def test_a_shard_is_passed_over_once_but_never_twice_in_a_row(self) -> None:
        # The bound is tight: a worker whose turn tries shard 1 first leases there
        # while shard 2 has a task; its next turn tries shard 2 first.
        reached = max(v for _, _, t in steps() for row in t.skipped.values()
                      for v in row.values())
        assert reached == constants().shards - 1

    def test_every_working_step_moves_on_and_only_idle_steps_repeat(self) -> None:
        # Idle steps (a turn with every shard empty, a duplicate send) change only a
        # worker's rotation; every other step raises the measure, so work stops.
        for s, label, t in steps():
            if idle_step(label):
                assert (t.ready, t.leased, t.ended, t.token, t.held, t.created) == (
                    s.ready, s.leased, s.ended, s.token, s.held, s.created), label
                assert kind(label) == "Send/duplicate" or not any(s.ready.values())
            else:
                assert progress(t) > progress(s), label

    def test_wherever_work_stops_every_created_task_has_ended(self) -> None:
        working = {s for s, label, _ in steps() if not idle_step(label)}
        stopped = {t for _, _, t in steps()} - working
        assert stopped
        for s in stopped:
            assert all(any(i in s.ended[x] for x in s.ended) for i in s.created)

    def test_a_stale_ack_changes_nothing_but_its_worker(self) -> None:
        stale = [(s, t) for s, label, t in steps("Shards_Retry.cfg")
                 if kind(label) == "Ack/stale"]
        assert stale
        for s, t in stale:
            assert t == s._replace(held=t.held)

    def test_a_reaped_task_retries_on_its_own_shard_and_leased_again_gets_a_new_token(
        self,
    ) -> None:
        c = constants("Shards_Retry.cfg")
        retried = [(label, t) for _, label, t in steps("Shards_Retry.cfg")
                   if kind(label) == "Reap/retried"]
        assert retried
        for label, t in retried:
            shard, i = bindings(label)
            assert shard == sh.id_shard(c, i) and t.ready[shard][-1] == i
        # Leased, reaped (a new token), leased again: the third token.
        leased_again = [t.held[1] for _, label, t in steps("Shards_Retry.cfg")
                        if kind(label) == "Turn/leased" and t.held[1][2] == 3]
        assert leased_again and all(x == sh.id_shard(c, i) for x, i, _ in leased_again)


class TestMutants:
    def test_routing_by_the_id_lets_one_key_name_a_task_on_each_shard(self) -> None:
        found = result("ShardsRouteById.tla", "ShardsRouteById.cfg")
        assert found.violation is not None and found.violation.name == "KeyNamesOneTask"
        assert actions(found) == ["ByIdSend(i=1,k=1)/created", "ByIdSend(i=3,k=1)/created"]
        last = found.violation.trace[-1].state
        assert (last.keyed[1][1], last.keyed[2][1]) == (1, 3)

    def test_a_fixed_order_passes_over_the_last_shard_while_the_first_is_busy(
        self,
    ) -> None:
        found = result("ShardsFixedOrder.tla", "ShardsFixedOrder.cfg")
        assert found.violation is not None and found.violation.name == "NoShardStarves"
        assert actions(found) == [
            "Send(i=1,k=0)/created", "Send(i=2,k=0)/created", "Send(i=3,k=0)/created",
            "FixedTurn(w=1)/leased", "Ack(w=1)/acked", "FixedTurn(w=1)/leased"]
        last = found.violation.trace[-1].state
        assert last.ready[2] == (3,) and last.skipped[1][2] == 2

    def test_the_same_behaviour_with_the_rotation_leases_the_last_shards_task_second(
        self,
    ) -> None:
        states = replay(build("Shards.cfg"), [
            "Send(i=1,k=0)/created", "Send(i=2,k=0)/created", "Send(i=3,k=0)/created",
            "Turn(w=1)/leased", "Ack(w=1)/acked", "Turn(w=1)/leased"])
        assert states[-1].held[1] == (2, 3, 1) and states[-1].ready[1] == (2,)


class TestExplicitIds:
    def test_ids_producers_give_keep_every_check_when_a_misfit_is_refused(self) -> None:
        found = result("Shards.tla", "Shards_ExplicitIds.cfg")
        assert found.ok
        assert (found.distinct, found.generated, found.depth, found.queued) == (
            14620, 124993, 14, 0)

    def test_a_key_first_sent_with_a_known_id_answers_that_task_from_then_on(self) -> None:
        """Left unbound (the mutant, the code before bind_key), the key's next send with
        another id made a second task: two answers for one key."""
        model = build("Shards_ExplicitIds.cfg")
        states = replay(model, ["Send(i=1,k=0)/created", "Send(i=1,k=1)/bound",
                                "Send(i=2,k=1)/duplicate"])
        assert (states[-1].keyed[1][1], states[-1].answered[1], states[-1].created) == (
            1, frozenset({1}), frozenset({1}))
        c = catalogued("ShardsKeyLeftUnbound.tla", "ShardsKeyLeftUnbound.cfg")
        mutant = c.build(cfgs.load(ROOT / c.config))
        states = replay(mutant, ["UnboundSend(i=1,k=0)/created", "UnboundSend(i=1,k=1)/unbound",
                                 "UnboundSend(i=2,k=1)/created"])
        assert states[-1].answered[1] == frozenset({1, 2})

    def test_an_id_with_a_key_of_another_shard_is_never_sent(self) -> None:
        """Without the refusal (routing.by_shard, the model's Fits) the second send here
        made a second task 1 on the key's shard, and the handle found the first."""
        model = build("Shards_ExplicitIds.cfg")
        states = replay(model, ["Send(i=1,k=0)/created"])
        sends = {name for name, _ in model.next(states[-1]) if name.startswith("Send(i=1")}
        assert "Send(i=1,k=1)/bound" in sends  # key 1 routes with id 1: sent
        assert not any(name.startswith("Send(i=1,k=2)") for name in sends)
        assert replay(model, ["Send(i=3,k=2)/created"])[-1].keyed[2][2] == 3
