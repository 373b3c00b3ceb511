"""The one error hierarchy: every taskq error survives a pickle and a copy whole."""

from __future__ import annotations

import copy
import pickle

import pytest

from taskq.errors import Retry, TaskCancelledError, TaskFailed, TaskqError, UpstreamFailed

ERRORS = [
    TaskFailed("t1", "shop.Boom", "no stock", "Traceback ...", 2),
    UpstreamFailed("f.2.1", "f.1.1", "shop.Boom", "no stock", "did not run", "step"),
    TaskCancelledError("f1", subject="workflow"),
    Retry(5, "the payment service is busy"),
    Retry(),
]


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
@pytest.mark.parametrize("how", [lambda e: pickle.loads(pickle.dumps(e)), copy.copy,
                                 copy.deepcopy], ids=["pickle", "copy", "deepcopy"])
def test_an_error_pickled_or_copied_keeps_its_type_message_and_attributes(
    error: TaskqError, how: object
) -> None:
    back = how(error)  # type: ignore[operator]
    assert type(back) is type(error)
    assert str(back) == str(error)
    assert vars(back) == vars(error)
