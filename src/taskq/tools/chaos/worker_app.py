"""The apps the chaos run's workers load (`--app` names them): `app` while its schedules
fire, `drain_app` after; built on import from the environment the run gives its
workers."""

from __future__ import annotations

from taskq.tools.chaos.schedules import limited_app, scheduling_app

app = scheduling_app()
drain_app = limited_app()
