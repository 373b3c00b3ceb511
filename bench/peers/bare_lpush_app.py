"""One LPUSH from a bare socket, one call per task (see bench/peers/bare.py)."""

from __future__ import annotations

from typing import Any


def enqueue(n: int) -> dict[str, Any]:
    from bench.peers.bare import lpush_sender  # noqa: PLC0415
    from bench.peers.client import stamps  # noqa: PLC0415

    return stamps(n, lpush_sender())
