"""The app the chaos run's workers load while its schedules fire (`--app` names it);
built on import from the environment the run gives its workers."""

from __future__ import annotations

from taskq.tools.chaos.schedules import scheduling_app

app = scheduling_app()
