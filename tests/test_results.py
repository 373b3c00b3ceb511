"""The values broker operations return: their reprs stay short whatever they carry."""

from __future__ import annotations

from taskq import App
from taskq.results import LeasedTask, NewTask


def test_the_repr_of_a_record_holding_a_megabyte_payload_and_result_stays_short(
    app: App,
) -> None:
    @app.task(name="echo")
    def echo(text: str) -> str:
        return text

    handle = echo.enqueue("x" * 1_000_000)
    record = handle.record()
    assert record is not None
    assert len(repr(record)) < 2_000
    assert f"task_id={handle.task_id!r}" in repr(record) and "state='pending'" in repr(record)
    assert "characters>" in repr(record)


def test_the_repr_of_a_new_or_leased_task_cuts_a_long_payload() -> None:
    new = NewTask("t1", payload={"args": ["x" * 100_000]})
    leased = LeasedTask("t1", 3, "echo", "y" * 100_000, 0, 3)
    assert len(repr(new)) < 1_000 and "task_id='t1'" in repr(new)
    assert len(repr(leased)) < 1_000 and "token=3" in repr(leased)
