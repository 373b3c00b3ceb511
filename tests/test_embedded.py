"""The embedded redis-server starts, keeps its data across restarts and crashes, and
leaves nothing behind; `check_server` refuses servers that could evict queue keys."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import taskq
from taskq.errors import EmbeddedRedisError, UnsafeRedisError
from taskq.safety import check_server, check_version, redis_version, too_old
from taskq.settings import Settings
from taskq.tools import embedded
from taskq.tools.embedded import MAX_SOCKET_PATH, EmbeddedRedis, free_port
from waiting import wait_until

BINARY = os.environ.get("REDIS_SERVER", "")


def alive(pid: int) -> bool:
    """Whether `pid` is a running process (a zombie has stopped running)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def rewriting(data_dir: Path) -> EmbeddedRedis:
    """A started server in `data_dir` whose AOF rewrite (a fork of it) is under way, and
    slow: 0.2 s a key, 50 keys."""
    server = EmbeddedRedis(binary=BINARY, data_dir=data_dir,
                           extra_config={"rdb-key-save-delay": "200000"})
    try:
        server.start()
        with client_for(server) as client:
            client.mset({f"k{i}": i for i in range(50)})
            client.bgrewriteaof()
            wait_until(lambda: client.info("persistence")["aof_rewrite_in_progress"] == 1,
                       5, "the rewrite to start")
    except BaseException:
        server.stop()
        raise
    return server


def group_members(pgid: int) -> list[int]:
    """The processes of group `pgid`, as /proc lists them."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(fields[2]) == pgid:
            members.append(int(stat.parent.name))
    return members


def wait_until_gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.02)
    return False


def last_aof(server: EmbeddedRedis) -> Path:
    """The AOF file writes go to: Redis 7's last INCR file, or Redis 6's one file."""
    assert server.data_dir is not None
    incr = sorted((server.data_dir / "appendonlydir").glob("*.incr.aof"))
    return incr[-1] if incr else server.data_dir / "appendonly.aof"


def client_for(server: EmbeddedRedis) -> redis.Redis:
    return taskq.connect(Settings.from_env({}, redis_url=server.url))


@pytest.fixture
def server(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis(binary=BINARY, data_dir=tmp_path / "data", appendfsync="always") as s:
        yield s


class TestStarting:
    def test_a_started_server_answers_on_its_url(self, server: EmbeddedRedis) -> None:
        assert server.url.startswith("unix://")
        with client_for(server) as client:
            assert client.ping()
            assert client.config_get("appendonly")["appendonly"] == "yes"
            assert client.config_get("maxmemory-policy")["maxmemory-policy"] == "noeviction"

    def test_it_listens_only_on_its_socket_inside_the_data_dir(
        self, server: EmbeddedRedis, tmp_path: Path
    ) -> None:
        assert server.socket_path == (tmp_path / "data" / "redis.sock").resolve()
        with client_for(server) as client:
            assert client.config_get("port")["port"] == "0"

    def test_a_long_data_dir_falls_back_to_a_short_socket_path(self, tmp_path: Path) -> None:
        deep = tmp_path / ("d" * 60) / ("e" * 60)
        server = EmbeddedRedis(binary=BINARY, data_dir=deep)
        socket_dir = server.socket_path.parent
        try:
            server.start()
            assert len(str(server.socket_path)) <= MAX_SOCKET_PATH
            assert not server.socket_path.is_relative_to(deep)
            with client_for(server) as client:
                client.set("k", "v")
            assert (deep / "redis.conf").exists()
        finally:
            server.cleanup()
        assert not socket_dir.exists()

    def test_a_long_tmpdir_too_falls_back_to_a_socket_under_tmp(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        long_tmp = tmp_path / ("t" * 60) / ("u" * 60)
        long_tmp.mkdir(parents=True)
        monkeypatch.setattr(tempfile, "tempdir", str(long_tmp))
        server = EmbeddedRedis(binary=BINARY, data_dir=tmp_path / ("d" * 60) / ("e" * 60))
        try:
            server.start()
            assert len(os.fsencode(server.socket_path)) <= MAX_SOCKET_PATH
            assert server.socket_path.parent.parent == Path("/tmp")
            with client_for(server) as client:
                assert client.ping()
        finally:
            server.cleanup()
        assert list(long_tmp.iterdir()) == []

    def test_a_tcp_port_is_served_on_loopback(self, tmp_path: Path) -> None:
        with EmbeddedRedis(binary=BINARY, data_dir=tmp_path / "tcp", port=free_port()) as s:
            assert s.url.startswith("redis://127.0.0.1:")
            with client_for(s) as client:
                assert client.ping()


class TestDurability:
    def test_a_graceful_restart_on_the_same_dir_keeps_the_data(self, server: EmbeddedRedis) -> None:
        with client_for(server) as client:
            client.rpush("list", "a", "b")
        server.stop()
        assert server.process is None
        server.start()
        with client_for(server) as client:
            assert client.lrange("list", 0, -1) == ["a", "b"]

    def test_a_crash_loses_nothing_written_with_appendfsync_always(
        self, server: EmbeddedRedis
    ) -> None:
        with client_for(server) as client:
            for i in range(50):
                client.set(f"k{i}", i)
        pid = server.pid
        assert pid is not None
        server.kill()
        assert not alive(pid)
        server.start()
        with client_for(server) as client:
            assert client.mget([f"k{i}" for i in range(50)]) == [str(i) for i in range(50)]

    def test_a_crash_during_an_aof_rewrite_is_restarted_at_once(self, tmp_path: Path) -> None:
        """The rewrite's fork holds the directory's lock with the server, and outlived a
        SIGKILL of the server alone: the restart was refused for as long as it wrote."""
        server = rewriting(tmp_path / "d")
        try:
            server.kill()
            server.start()
            with client_for(server) as client:
                assert client.get("k49") == "49"
        finally:
            server.stop()

    def test_a_server_already_reaped_is_not_killed_by_its_old_group_number(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Once reaped, the server's pid is free for another process to take: a
        kill() after it sent SIGKILL to whatever group held that number then."""
        server = EmbeddedRedis(binary=BINARY, data_dir=tmp_path / "d")
        server.start()
        pid = server.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)  # the OOM killer, from outside
        assert wait_until_gone(pid)
        assert server.process is not None
        server.process.wait()  # reaped, as a poll() of it (a signal() sent) reaps it
        sent: list[int] = []
        real = os.killpg
        monkeypatch.setattr(os, "killpg", lambda pgid, signum: (
            sent.append(signum) if signum else None, real(pgid, signum)))
        server.kill()
        assert sent == []
        server.start()  # its lock was let go
        server.stop()

    def test_a_reaped_server_s_rewrite_fork_is_killed_with_it(self, tmp_path: Path) -> None:
        """The fork, still in the server's group, keeps the group's number its own: it
        held the directory's lock, and the restart after the kill was refused while it
        lived (stopped here, so that it outlives the server however the server's
        build ends its forks on its own)."""
        server = rewriting(tmp_path / "d")
        try:
            assert server.process is not None
            pid = server.process.pid
            (fork,) = [p for p in group_members(pid) if p != pid]
            os.kill(fork, signal.SIGSTOP)
            os.kill(pid, signal.SIGKILL)
            server.process.wait()  # reaped, its fork still holding the lock
            server.kill()
            server.start()
        finally:
            server.stop()

    def test_a_script_cut_short_by_a_crash_is_never_applied_in_part_by_later_restarts(
        self, server: EmbeddedRedis
    ) -> None:
        """A crash that cuts the AOF inside a script's MULTI/EXEC: the cut script stays
        unapplied through every later restart, and what came after it stays applied.
        (Redis 7.0 left the MULTI open, so its second restart set `a`.)"""
        with client_for(server) as client:
            client.set("before", "1")
            client.eval("redis.call('SET', 'a', '1'); redis.call('RPUSH', 'l', 'x'); "
                        "redis.call('SET', 'b', '2')", 0)
        server.stop()
        aof = last_aof(server)
        written = aof.read_bytes()
        aof.write_bytes(written[:written.rindex(b"RPUSH") + 20])  # a crash mid-script
        server.start()
        with client_for(server) as client:
            assert sorted(client.keys("*")) == ["before"]
            client.eval("redis.call('RPUSH', 'l', 'y'); redis.call('SET', 'c', '3')", 0)
        server.stop()
        server.start()
        with client_for(server) as client:
            assert sorted(client.keys("*")) == ["before", "c", "l"]
            assert client.lrange("l", 0, -1) == ["y"]
        assert "redis-check-aof --fix" in (server.data_dir / "redis.log").read_text()  # type: ignore[operator]

    def test_a_broker_queue_survives_a_crash(self, server: EmbeddedRedis) -> None:
        with client_for(server) as client:
            broker = taskq.Broker(client, "q")
            broker.enqueue("t1", payload={"n": 1})
        server.kill()
        server.start()
        with client_for(server) as client:
            broker = taskq.Broker(client, "q")
            assert broker.counts().ready == 1
            assert broker.payload("t1") == {"n": 1}


class TestNothingIsLeftBehind:
    def test_cleanup_stops_the_process_and_removes_its_own_dir(self) -> None:
        server = EmbeddedRedis(binary=BINARY).start()
        pid, data_dir = server.pid, server.data_dir
        assert pid is not None and alive(pid)
        assert data_dir is not None and data_dir.exists()
        server.cleanup()
        assert not alive(pid)
        assert not data_dir.exists()

    def test_cleanup_keeps_a_data_dir_it_was_given(self, tmp_path: Path) -> None:
        with EmbeddedRedis(binary=BINARY, data_dir=tmp_path / "kept") as server:
            pid = server.pid
        assert pid is not None and not alive(pid)
        assert (tmp_path / "kept" / "redis.conf").exists()

    def test_the_server_dies_with_the_process_that_started_it(self, tmp_path: Path) -> None:
        snippet = (
            "import os, signal\n"
            "from pathlib import Path\n"
            "from taskq.tools.embedded import EmbeddedRedis\n"
            f"server = EmbeddedRedis({BINARY!r}, Path({str(tmp_path / 'orphan')!r}))\n"
            "server.start()\n"
            "print(server.pid, flush=True)\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n"
        )
        result = subprocess.run(
            [sys.executable, "-c", snippet], check=False, capture_output=True, text=True, timeout=30
        )
        assert result.returncode == -9
        assert wait_until_gone(int(result.stdout))


class TestBadBinaries:
    def test_a_non_executable_redis_server_is_refused_naming_it(self, tmp_path: Path) -> None:
        binary = tmp_path / "redis-server"
        binary.write_text("not a program")
        with pytest.raises(EmbeddedRedisError) as caught:
            EmbeddedRedis(binary=str(binary))
        assert f"REDIS_SERVER={str(binary)!r} is not an executable file" in str(caught.value)

    def test_a_missing_redis_server_is_refused_naming_it(self, tmp_path: Path) -> None:
        with pytest.raises(EmbeddedRedisError, match=r"REDIS_SERVER=.*nowhere"):
            EmbeddedRedis(binary=str(tmp_path / "nowhere"))

    def test_a_start_that_timed_out_and_repaired_the_aof_is_launched_again(
        self, tmp_path: Path
    ) -> None:
        """The timed-out server's kill let the directory's lock go, and the launch after
        the repair failed on an assertion instead of saying what happened."""
        binary = tmp_path / "fake-redis"
        binary.write_text('#!/bin/sh\ncase "$1" in\n'
                          '  --version) echo "Redis server v=7.0.15 sha=0:0 bits=64"; exit 0;;\n'
                          '  --fix) echo "Successfully truncated AOF"; exit 0;;\n'
                          "esac\nexec sleep 3\n")
        binary.chmod(0o755)
        data = tmp_path / "d"
        data.mkdir()
        (data / "appendonly.aof").write_text("*1\r\n$4\r\nPING\r\n")
        server = EmbeddedRedis(binary=str(binary), data_dir=data)
        try:
            with pytest.raises(EmbeddedRedisError, match=r"did not answer within 0\.5s"):
                server.start(timeout=0.5)
            assert "redis-check-aof --fix after a failed start" in (
                data / "redis.log").read_text()
        finally:
            server.kill()

    def test_a_server_that_exits_at_once_is_reported_with_its_status(self, tmp_path: Path) -> None:
        binary = tmp_path / "fake-redis"
        binary.write_text("#!/bin/sh\nexit 3\n")
        binary.chmod(0o755)
        server = EmbeddedRedis(binary=str(binary), data_dir=tmp_path / "fake")
        # A server that could not write its log (a full disk) said only "(no log)".
        with pytest.raises(EmbeddedRedisError, match=r"exited with status 3: it wrote no log: "
                                                     r"is .*fake full, or not writable\?"):
            server.start()
        server.cleanup()


    @pytest.mark.parametrize(("script", "error"), [
        ("sleep 100", r"did not answer --version within 1s: is it redis-server\?"),
        ("echo 'Python 3.11.7'", r"does not look like redis-server: its --version says "
                                 r"'Python 3\.11\.7'"),
    ], ids=["silent", "another-program"])
    def test_a_binary_that_is_not_redis_server_is_refused_saying_so(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str, error: str
    ) -> None:
        monkeypatch.setattr(embedded, "VERSION_SECONDS", 1.0)
        binary = tmp_path / "not-redis"
        binary.write_text(f"#!/bin/sh\nexec {script}\n")
        binary.chmod(0o755)
        server = EmbeddedRedis(binary=str(binary), data_dir=tmp_path / "data")
        with pytest.raises(EmbeddedRedisError, match=error):
            server.start()
        assert server.process is None
        server.cleanup()

    def test_a_server_older_than_6_2_is_refused_before_it_starts(self, tmp_path: Path) -> None:
        binary = tmp_path / "old-redis"
        binary.write_text("#!/bin/sh\necho 'Redis server v=5.0.6 sha=00000000:0 malloc=libc'\n")
        binary.chmod(0o755)
        server = EmbeddedRedis(binary=str(binary), data_dir=tmp_path / "old")
        with pytest.raises(EmbeddedRedisError, match=r"Redis 5\.0\.6 is older than taskq "
                           r"needs: .* run Redis 6\.2 or newer \(set REDIS_SERVER"):
            server.start()
        assert server.process is None  # never launched
        server.cleanup()

    def test_a_redis_6_is_refused_the_files_of_a_redis_7_it_would_start_without(
        self, tmp_path: Path
    ) -> None:
        """Redis 6.2 does not read appendonlydir/: it started empty, and the tasks kept
        there were lost once a Redis 7 came back."""
        binary = tmp_path / "redis-6"
        binary.write_text("#!/bin/sh\necho 'Redis server v=6.2.14 sha=00000000:0'\nexit 3\n")
        binary.chmod(0o755)
        data = tmp_path / "data"
        (data / "appendonlydir").mkdir(parents=True)
        server = EmbeddedRedis(binary=str(binary), data_dir=data)
        with pytest.raises(EmbeddedRedisError, match="holds the data of a Redis 7"):
            server.start()
        server.cleanup()
        (data / "appendonlydir").rmdir()
        with pytest.raises(EmbeddedRedisError, match="exited with status 3"):
            EmbeddedRedis(binary=str(binary), data_dir=data).start()  # no such files: tried


class TestItsDirectory:
    def test_a_directory_the_locale_cannot_spell_is_served(self, tmp_path: Path) -> None:
        """Under LANG=C without UTF-8 mode, writing redis.conf as text raised
        UnicodeEncodeError for a directory named 'dé mo'."""
        data = tmp_path / "dé mo"
        code = ("import sys; from pathlib import Path; "
                "from taskq.tools.embedded import EmbeddedRedis; "
                "import redis; "
                "s = EmbeddedRedis(data_dir=Path(sys.argv[1])).start(); "
                "print(redis.Redis.from_url(s.url).ping()); s.stop()")
        done = subprocess.run([sys.executable, "-c", code, os.fsencode(data)],
                              capture_output=True, text=True, timeout=60, check=False,
                              env={**os.environ, "PYTHONUTF8": "0", "LC_ALL": "C",
                                   "PYTHONCOERCECLOCALE": "0"})
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.strip() == "True"

    def test_a_path_with_spaces_quotes_and_a_newline_is_served(self) -> None:
        # Short enough that the socket is made inside it (see MAX_SOCKET_PATH).
        base = Path(tempfile.mkdtemp(prefix="q ", dir="/tmp"))
        odd = base / 'a "b"\nunixsocketperm 777'
        try:
            with EmbeddedRedis(binary=BINARY, data_dir=odd) as server, \
                    client_for(server) as c:
                assert c.ping()
                assert server.socket_path.parent == odd.resolve()
                assert oct(server.socket_path.stat().st_mode & 0o777) == "0o700"
                assert (odd / "redis.log").is_file()  # its dir= is the odd one
        finally:
            shutil.rmtree(base)

    def test_a_second_server_in_a_running_ones_directory_is_refused(
        self, tmp_path: Path
    ) -> None:
        with EmbeddedRedis(binary=BINARY, data_dir=tmp_path / "d") as first:
            with pytest.raises(EmbeddedRedisError, match="still runs in"):
                EmbeddedRedis(binary=BINARY, data_dir=tmp_path / "d").start()
            with client_for(first) as c:
                assert c.ping()  # its socket was left alone
        with EmbeddedRedis(binary=BINARY, data_dir=tmp_path / "d") as again, \
                client_for(again) as c:
            assert c.ping()

    def test_a_server_that_outlives_its_taskq_keeps_its_directory_locked(
        self, tmp_path: Path
    ) -> None:
        """The lock was the taskq process's alone: a server slow to act on the SIGTERM
        its parent's death sent (stopped here) let a second one start in its directory,
        and the first, ending, removed the second's socket."""
        snippet = (
            "import os, signal\n"
            "from pathlib import Path\n"
            "from taskq.tools.embedded import EmbeddedRedis\n"
            f"server = EmbeddedRedis({BINARY!r}, Path({str(tmp_path / 'd')!r}))\n"
            "server.start()\n"
            "os.kill(server.pid, signal.SIGSTOP)\n"
            "print(server.pid, flush=True)\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n"
        )
        result = subprocess.run([sys.executable, "-c", snippet], check=False,
                                capture_output=True, text=True, timeout=30)
        first = int(result.stdout)
        try:
            with pytest.raises(EmbeddedRedisError, match="still runs in"):
                EmbeddedRedis(binary=BINARY, data_dir=tmp_path / "d").start()
        finally:
            os.kill(first, signal.SIGCONT)  # it acts on its parent's SIGTERM now
        assert wait_until_gone(first)
        with EmbeddedRedis(binary=BINARY, data_dir=tmp_path / "d") as again, \
                client_for(again) as c:
            assert c.ping()

    def test_a_refused_config_is_reported_in_redis_own_words_and_leaves_no_dir(self) -> None:
        server = EmbeddedRedis(binary=BINARY, port=70000)
        with pytest.raises(EmbeddedRedisError, match=r"exited with status 1: .*port"):
            server.__enter__()
        assert server.data_dir is not None and not server.data_dir.exists()


@pytest.fixture(scope="module")
def private_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    """A server of this module's own: its CONFIG is changed, so never the session's."""
    with EmbeddedRedis(binary=BINARY, data_dir=tmp_path_factory.mktemp("safety")) as s:
        yield s


@pytest.fixture
def private_client(private_server: EmbeddedRedis) -> Iterator[redis.Redis]:
    with client_for(private_server) as client:
        yield client
        client.config_set("maxmemory-policy", "noeviction")
        client.config_set("appendonly", "yes")


class TestCheckServer:
    @pytest.mark.parametrize("policy", ["allkeys-lru", "allkeys-random", "volatile-ttl"])
    def test_an_evicting_policy_is_refused(self, private_client: redis.Redis, policy: str) -> None:
        private_client.config_set("maxmemory-policy", policy)
        with pytest.raises(UnsafeRedisError) as caught:
            check_server(private_client)
        assert repr(policy) in str(caught.value)
        assert "noeviction" in str(caught.value)

    def test_noeviction_with_aof_passes_silently(
        self, private_client: redis.Redis, caplog: pytest.LogCaptureFixture
    ) -> None:
        with caplog.at_level(logging.WARNING, logger="taskq"):
            check_server(private_client)
        assert caplog.records == []

    def test_aof_off_gives_a_warning(
        self, private_client: redis.Redis, caplog: pytest.LogCaptureFixture
    ) -> None:
        private_client.config_set("appendonly", "no")
        with caplog.at_level(logging.WARNING, logger="taskq"):
            check_server(private_client)
        assert any("AOF is off" in r.getMessage() for r in caplog.records)

    def test_a_client_without_decoding_is_checked_too(
        self, private_server: EmbeddedRedis, private_client: redis.Redis
    ) -> None:
        private_client.config_set("maxmemory-policy", "allkeys-lru")
        with (
            redis.Redis(unix_socket_path=str(private_server.socket_path)) as raw,
            pytest.raises(UnsafeRedisError),
        ):
            check_server(raw)

    def test_a_server_hiding_config_gives_a_warning(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        hidden = EmbeddedRedis(
            binary=BINARY,
            data_dir=tmp_path / "hidden",
            extra_config={"rename-command": 'CONFIG ""'},
        )
        with hidden, client_for(hidden) as client, caplog.at_level(logging.WARNING, "taskq"):
            check_server(client)
        assert any("cannot read the server's CONFIG" in r.getMessage() for r in caplog.records)

    def test_a_user_denied_info_gives_a_warning_not_a_refusal(
        self, private_server: EmbeddedRedis, private_client: redis.Redis,
        caplog: pytest.LogCaptureFixture
    ) -> None:
        private_client.acl_setuser("app", enabled=True, passwords=["+pw"], keys=["*"],
                                   channels=["*"], commands=["+@all", "-@dangerous"])
        try:
            with (
                redis.Redis(unix_socket_path=str(private_server.socket_path), username="app",
                            password="pw") as app_user,
                caplog.at_level(logging.WARNING, "taskq"),
            ):
                check_server(app_user)
        finally:
            private_client.acl_deluser("app")
        warned = [r.getMessage() for r in caplog.records]
        assert any(w.startswith("cannot read the server's INFO (") and "Redis 6.2 or newer"
                   in w for w in warned), warned

    def test_a_server_older_than_6_2_is_refused_by_its_version(
        self, private_client: redis.Redis
    ) -> None:
        assert redis_version("7.0.15") == (7, 0, 15)
        assert redis_version("Redis server v=6.2.14 sha=00000000:0") == (6, 2, 14)
        assert redis_version("no version here") is None
        assert too_old((6, 2, 0)) is None and too_old((7, 4, 1)) is None
        assert "Redis 6.0.9 is older than taskq needs" in (too_old((6, 0, 9)) or "")
        check_version(private_client)  # this one is new enough
        check_version(redis.Redis(connection_pool=private_client.connection_pool))

    def test_unsafe_redis_error_is_a_broker_error(self) -> None:
        assert issubclass(UnsafeRedisError, taskq.BrokerError)
