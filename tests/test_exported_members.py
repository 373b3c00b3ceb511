"""The public surface of taskq is exactly what `__all__` lists, and all of it imports."""

from __future__ import annotations

import importlib
import types

import pytest

import taskq

EXPECTED = [
    "App",
    "Broker",
    "BrokerError",
    "Cancellation",
    "Chain",
    "ConfigError",
    "EmbeddedRedisError",
    "Enqueued",
    "FailResult",
    "Failure",
    "FlowCancellation",
    "FlowStatus",
    "Group",
    "IdleTimeoutError",
    "IncompleteEnqueueError",
    "InvalidTaskError",
    "LeaseBatch",
    "LeaseLostError",
    "LeasedTask",
    "Ledger",
    "LedgerError",
    "MemberFailure",
    "NewTask",
    "NoResultError",
    "Options",
    "PayloadError",
    "PayloadTooLargeError",
    "ResultError",
    "ResultTimeoutError",
    "Retry",
    "RetryPolicy",
    "Settings",
    "Step",
    "StepState",
    "Task",
    "TaskCancelledError",
    "TaskContext",
    "TaskFailed",
    "TaskHandle",
    "TaskNotFoundError",
    "TaskRecord",
    "TaskqError",
    "TimeLimitExceeded",
    "UnknownTaskError",
    "UnsafeRedisError",
    "UpstreamFailed",
    "Worker",
    "WorkflowHandle",
    "__version__",
    "chain",
    "connect",
    "current_task",
    "failure_of",
    "group",
]


def test_all_lists_exactly_the_documented_names_in_sorted_order() -> None:
    assert taskq.__all__ == EXPECTED
    assert taskq.__all__ == sorted(taskq.__all__)


@pytest.mark.parametrize("name", EXPECTED)
def test_every_exported_name_can_be_imported_from_taskq(name: str) -> None:
    module = importlib.import_module("taskq")
    assert getattr(module, name) is not None


def test_public_names_not_in_all_are_only_submodules() -> None:
    public = {n for n in dir(taskq) if not n.startswith("_")}
    extra = {n for n in public - set(EXPECTED) if not _is_submodule(n)}
    assert extra == set()


def test_every_exported_error_derives_from_taskq_error() -> None:
    errors = [n for n in EXPECTED if n.endswith("Error")]
    assert errors
    for name in errors:
        assert issubclass(getattr(taskq, name), taskq.TaskqError), name


def test_every_exported_error_says_when_it_is_raised() -> None:
    for name in (n for n in EXPECTED if n.endswith("Error")):
        doc = getattr(taskq, name).__doc__ or ""
        assert doc.startswith(("Raised when", "Raised inside")), name


@pytest.mark.parametrize("name", ["connect", "NewTask", "Enqueued", "FailResult", "Broker"])
def test_broker_module_exposes_the_seed_api(name: str) -> None:
    broker = importlib.import_module("taskq.broker")
    assert name in broker.__all__
    assert getattr(broker, name) is getattr(taskq, name)


def test_version_is_a_dotted_string() -> None:
    assert isinstance(taskq.__version__, str)
    assert all(part.isdigit() for part in taskq.__version__.split("."))


def _is_submodule(name: str) -> bool:
    return isinstance(getattr(taskq, name), types.ModuleType)
