"""The change feed's server-sent event frames (taskq.feed.frames)."""

from __future__ import annotations

import pytest

from taskq.feed.cursor import Cursor
from taskq.feed.log import Row


@pytest.mark.parametrize("written", [
    "enqueued\r\nevent: evil", "enqueued\nid: 666", "enqueued\x00", "Enqueued", "x" * 33])
def test_a_row_whose_type_was_written_by_hand_is_framed_as_a_plain_event(
    written: str,
) -> None:
    """Rows XADDed by hand reach the feed too: only a name the scripts could have
    written may stand in `event:`, so no CR, LF or NUL splits the frame."""
    frame = Row(Cursor("1", 7, "123"), {"type": written, "task": "t1"}).frame
    lines = frame.split("\n")
    assert lines[:2] == ["id: 1.7.123", "event: event"]
    assert lines[2].startswith("data: {") and lines[3:] == ["", ""]
    assert "\r" not in frame and "\x00" not in frame


def test_a_row_of_a_scripts_type_is_framed_under_its_own_name() -> None:
    frame = Row(Cursor("1", 7, "123"), {"type": "completed", "task": "t1"}).frame
    assert frame.split("\n")[1] == "event: completed"
