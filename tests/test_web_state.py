"""What the web app holds while it runs: a broker for each queue the API is asked about,
at most MAX_BROKERS of them, however many names its clients make up."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from taskq.errors import InvalidTaskError
from taskq.settings import Settings
from taskq.web import state as state_module
from taskq.web.state import WebState


@pytest.fixture
def web(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[WebState]:
    monkeypatch.setattr(state_module, "MAX_BROKERS", 3)
    web = WebState.create(settings)
    yield web
    asyncio.run(web.close())


def test_the_brokers_kept_are_the_ones_asked_for_most_recently(web: WebState) -> None:
    first = web.broker("a")
    for name in ("b", "c", "a", "d"):
        web.broker(name)
    assert list(web.brokers) == ["c", "a", "d"]
    # A kept broker is the same one; a dropped one is built again when asked for.
    assert web.broker("a") is first
    assert web.broker("b").queue == "b"
    assert list(web.brokers) == ["d", "a", "b"]


def test_names_made_up_by_many_threads_at_once_never_pass_the_bound(web: WebState) -> None:
    wrong: list[str] = []

    def ask(thread: int) -> None:
        for i in range(200):
            name = f"made-up-{thread}-{i}"
            if web.broker(name).queue != name:
                wrong.append(name)

    threads = [threading.Thread(target=ask, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == []
    assert len(web.brokers) == 3


def test_an_invalid_name_is_refused_and_keeps_no_broker(web: WebState) -> None:
    with pytest.raises(InvalidTaskError):
        web.broker("bad name with spaces")
    assert list(web.brokers) == []
