"""The simulated task (`taskq.simulate`): it charges the ledger once per run, and a run
told that its task was cancelled stops before its charge."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from taskq.context import TaskContext, bind, unbind
from taskq.results import SIMULATE_TASK
from taskq.settings import Simulation
from taskq.tools.ledger import Ledger
from taskq.tools.simulation import builtin_app


def run_simulated(ledger: Path, cancelled: bool) -> Any:
    """Run the handler once as a worker would, with its run's context bound."""
    app = builtin_app(simulation=Simulation(work_seconds=0, after_effect_seconds=0,
                                            ledger_path=str(ledger)))
    context = TaskContext(task_id="t1", name=SIMULATE_TASK, queue="q", worker_id="w",
                          token=3, attempt=1, max_retries=0)
    if cancelled:
        context.cancel()
    token = bind(context)
    try:
        return app.tasks[SIMULATE_TASK].fn(charge=5)
    finally:
        unbind(token)


def test_a_run_charges_the_ledger_and_returns_its_token(tmp_path: Path) -> None:
    result = run_simulated(tmp_path / "ledger.db", cancelled=False)
    assert result == {"outcome": "applied", "token": 3, "attempt": 1}
    assert Ledger(tmp_path / "ledger.db").charges_for("t1") == 1


def test_a_run_told_of_its_cancel_stops_before_its_charge(tmp_path: Path) -> None:
    result = run_simulated(tmp_path / "ledger.db", cancelled=True)
    assert result == {"outcome": "cancelled", "token": 3, "attempt": 1}
    assert Ledger(tmp_path / "ledger.db").charges_for("t1") == 0
