"""The `taskq` command when Redis is unreachable or REDIS_URL is malformed: one line on
stderr naming where it looked and what to do, exit status 2, never a traceback."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest
import redis

from cli_support import command_env, taskq
from conftest import ON_CLUSTER
from taskq.cli import serve
from taskq.tools.embedded import EmbeddedRedis, free_port

# Every command that talks to the Redis that REDIS_URL names.
REDIS_COMMANDS = [
    ["worker"],
    ["worker", "--processes", "2"],
    ["enqueue", "1"],
    ["dlq"],
    ["dlq", "retry", "--all"],
    ["flow", "show", "any"],
    ["flow", "cancel", "any"],
    ["dashboard", "--once"],
    ["demo", "--tasks", "1", "--workers", "1"],
]
# ... and those that only read their settings.
SETTINGS_ONLY_COMMANDS = [["ledger"], ["redis", "--port", "0"], ["serve", "--port", "0"]]


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    """The single line a refused command printed, after checking how it exited."""
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def run(argv: list[str], redis_url: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """`taskq argv` with REDIS_URL set, writing any files (ledger, demo data) to tmp_path."""
    if argv[0] == "demo":
        argv = [*argv, "--dir", str(tmp_path / "demo")]
    env = command_env(REDIS_URL=redis_url, LEDGER_PATH=str(tmp_path / "ledger.db"))
    return taskq(*argv, env=env, timeout=60)


@pytest.fixture
def nowhere() -> str:
    """A Redis URL nothing listens on."""
    return f"redis://127.0.0.1:{free_port()}/0"


class TestUnreachableRedis:
    @pytest.mark.parametrize("argv", REDIS_COMMANDS, ids=" ".join)
    def test_a_command_exits_2_with_one_line_naming_redis_url_and_what_to_do(
        self, argv: list[str], nowhere: str, tmp_path: Path
    ) -> None:
        line = one_line(run(argv, nowhere, tmp_path))
        assert line.startswith(f"taskq {argv[0]}: cannot reach Redis at REDIS_URL='{nowhere}'")
        assert "Connection refused" in line
        assert "taskq redis" in line

    def test_the_password_in_redis_url_is_masked(self, tmp_path: Path) -> None:
        url = f"redis://me:s3cret@127.0.0.1:{free_port()}/0"
        line = one_line(run(["dlq"], url, tmp_path))
        assert "s3cret" not in line
        assert "REDIS_URL='redis://me:***@127.0.0.1:" in line

    def test_a_tls_url_to_a_redis_without_tls_says_so(self, tmp_path: Path) -> None:
        with EmbeddedRedis(port=free_port(), data_dir=tmp_path / "plain") as plain:
            url = f"rediss://127.0.0.1:{plain.port}/0"
            env = command_env(REDIS_URL=url, REDIS_TIMEOUT_SECONDS="0.5")
            line = one_line(taskq("dlq", env=env, timeout=60))
        assert "a Redis without TLS never answers a rediss:// handshake" in line
        assert "use redis:// in REDIS_URL" in line

    def test_chaos_names_its_redis_url_option(self, nowhere: str, tmp_path: Path) -> None:
        argv = ["chaos", "--tasks", "1", "--workers", "1", "--dir", str(tmp_path / "chaos"),
                "--redis-url", nowhere]
        line = one_line(run(argv, "", tmp_path))
        assert line.startswith(f"taskq chaos: cannot reach Redis at --redis-url='{nowhere}'")


class TestMalformedRedisUrl:
    @pytest.mark.parametrize("argv", REDIS_COMMANDS + SETTINGS_ONLY_COMMANDS, ids=" ".join)
    def test_a_url_without_a_scheme_exits_2_with_one_line_saying_how_to_write_it(
        self, argv: list[str], tmp_path: Path
    ) -> None:
        line = one_line(run(argv, "localhost:6379", tmp_path))
        assert line == (f"taskq {argv[0]}: REDIS_URL='localhost:6379' has no scheme: write "
                        "it as redis://localhost:6379 (rediss:// for TLS, "
                        "unix:///path/to/redis.sock for a socket)")

    def test_the_password_of_a_malformed_url_is_masked(self, tmp_path: Path) -> None:
        line = one_line(run(["enqueue"], "http://:s3cret@localhost:6379", tmp_path))
        assert "s3cret" not in line
        assert "REDIS_URL='http://:***@localhost:6379' has the unknown scheme http://" in line

    def test_a_port_that_is_not_a_number_stops_serve_before_it_listens(
        self, tmp_path: Path
    ) -> None:
        line = one_line(run(["serve", "--port", "0"], "redis://:s3cret@h:abc/0", tmp_path))
        assert line.startswith("taskq serve: REDIS_URL='redis://:***@h:abc/0' is not a Redis URL")

    def test_chaos_refuses_a_negative_prefetch_before_it_runs(self, tmp_path: Path) -> None:
        argv = ["chaos", "--tasks", "1", "--prefetch", "-1", "--dir", str(tmp_path / "chaos")]
        line = one_line(run(argv, "", tmp_path))
        assert line == ("taskq chaos: --prefetch must be a whole number of tasks between 0 "
                        "and 9999, not -1")
        assert not (tmp_path / "chaos").exists()

    def test_chaos_refuses_a_malformed_redis_url_option_before_it_runs(
        self, tmp_path: Path
    ) -> None:
        argv = ["chaos", "--tasks", "1", "--dir", str(tmp_path / "chaos"),
                "--redis-url", "localhost:6379"]
        line = one_line(run(argv, "", tmp_path))
        assert line.startswith("taskq chaos: --redis-url: REDIS_URL='localhost:6379' has no scheme")
        assert not (tmp_path / "chaos").exists()


@pytest.mark.parametrize("command", [["enqueue", "1"], ["dlq"], ["history"]])
def test_an_empty_queue_option_is_refused_not_read_as_the_default(
    command: list[str], nowhere: str, tmp_path: Path
) -> None:
    line = one_line(run([*command, "--queue", ""], nowhere, tmp_path))
    assert line.startswith(f"taskq {command[0]}: --queue: invalid queue name ''"), line


class TestOutOfRangeOptions:
    """A number out of an option's range stops the command before it reaches Redis (here
    nowhere) or starts anything: one line naming the option, its range and the value."""

    @pytest.mark.parametrize(("argv", "said"), [
        (["enqueue", "1" + "0" * 30],
         "count must be a whole number of tasks between 0 and 1000000, not 1000000"),
        (["dashboard", "--once", "--interval", "inf"],
         "--interval must be a number of seconds above 0 and at most 86400, not inf"),
        (["dashboard", "--once", "--rows", "-5"],
         "--rows must be a whole number of tasks between 1 and 1000, not -5"),
        (["serve", "--port", "99999"],
         "--port must be a whole number between 0 and 65535, not 99999"),
        (["worker", "--queue", "a:" + "9" * 5000],
         "--queue 'a:9999"),
        (["worker", "--concurrency", "0"],
         "--concurrency must be a whole number of handlers between 1 and 10000, not 0"),
        (["worker", "--processes", "0"],
         "--processes must be a whole number of processes between 1 and 256, not 0"),
        (["worker", "--prefetch", "-1"],
         "--prefetch must be a whole number of tasks between 0 and 9999, not -1"),
        # It named TASKQ_PREFETCH and TASKQ_CONCURRENCY, which the user never set.
        (["worker", "-c", "5000", "--prefetch", "5001"],
         "--concurrency 5000 and --prefetch 5001 must be at most 10,000 together, not "
         "10,001"),
        (["chaos", "--tasks", "1", "--lease-seconds", "0.1"],
         "--lease-seconds must be a number of seconds between 0.25 and 604800, not 0.1"),
        (["history", "--limit", "0"],
         "limit must be a whole number of tasks between 1 and 1000, not 0"),
    ], ids=["enqueue-count", "dashboard-interval", "dashboard-rows", "serve-port",
            "worker-queue-weight", "worker-concurrency", "worker-processes",
            "worker-prefetch", "worker-prefetch-and-concurrency", "chaos-lease",
            "history-limit"])
    def test_the_command_says_which_option_and_exits_2(
        self, argv: list[str], said: str, nowhere: str, tmp_path: Path
    ) -> None:
        line = one_line(run(argv, nowhere, tmp_path))
        assert line.startswith(f"taskq {argv[0]}: {said}"), line
        assert " must be " in line and "Redis" not in line


def test_a_task_id_no_task_can_have_is_refused_before_redis_is_asked(
    nowhere: str, tmp_path: Path
) -> None:
    """Else a note that the queue is unknown came first, or Redis's absence alone."""
    line = one_line(run(["task", "\N{LATIN SMALL LETTER E WITH ACUTE}"], nowhere, tmp_path))
    assert line.startswith("taskq task: invalid task id '\N{LATIN SMALL LETTER E WITH ACUTE}'")
    assert "Redis" not in line


def test_a_serve_host_that_is_no_name_or_address_is_said_so(
    nowhere: str, tmp_path: Path
) -> None:
    """Else it was refused for want of a token, as a host beyond loopback."""
    line = one_line(run(["serve", "--host", "not a host!"], nowhere, tmp_path))
    assert line == "taskq serve: --host 'not a host!' is no host name or IP address"


@pytest.mark.parametrize("host", ["[::1]", "LOCALHOST", "localhost."])
def test_a_loopback_host_however_written_needs_no_token(host: str) -> None:
    """`[::1]` as it is written in a URL was no host at all, and `localhost` in capitals
    or with its root dot was taken as beyond loopback, refused without a token."""
    assert serve.is_host(serve.unbracketed(host))
    serve.check_exposure(serve.unbracketed(host), token="")


def test_a_redis_data_dir_that_cannot_be_made_is_named_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    line = one_line(run(["redis", "--port", "0", "--dir", str(tmp_path / "file" / "data")],
                        "", tmp_path))
    assert line == (f"taskq redis: --dir '{tmp_path}/file/data': cannot make it Redis's data "
                    "directory: Not a directory")


@pytest.mark.skipif(ON_CLUSTER, reason="a cluster has one database")
def test_a_database_past_the_servers_last_is_named_in_one_line(
    redis_server: EmbeddedRedis, tmp_path: Path
) -> None:
    base = redis_server.url.split("?")[0]
    url = f"{base}?db=99" if base.startswith("unix://") else base.rsplit("/", 1)[0] + "/99"
    line = one_line(run(["dlq"], url, tmp_path))
    assert line.startswith("taskq dlq: could not ")
    assert "no database of the number REDIS_URL names" in line


def test_serve_on_a_port_in_use_says_so_in_one_line_before_any_url(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        line = one_line(run(["serve", "--port", str(port)], "redis://127.0.0.1:6379/0",
                            tmp_path))
    assert line == (f"taskq serve: cannot listen on 127.0.0.1 port {port}: Address already "
                    "in use; pick another --port, or stop what holds it")


def test_a_redis_data_dir_it_cannot_write_is_named_in_one_line(tmp_path: Path) -> None:
    """/proc/1 exists and takes no lock file, as a read-only or full disk would not."""
    line = one_line(run(["redis", "--port", "0", "--dir", "/proc/1"], "", tmp_path))
    assert line.startswith("taskq redis: --dir '/proc/1': cannot run Redis there: "), line


def test_a_redis_at_its_maxclients_says_to_raise_it_not_to_start_one(tmp_path: Path) -> None:
    with EmbeddedRedis(port=free_port(), data_dir=tmp_path / "full") as full:
        holder = redis.Redis(port=full.port)
        holder.config_set("maxclients", 1)
        line = one_line(run(["dlq"], full.url, tmp_path))
        holder.config_set("maxclients", 10000)
    assert line == (f"taskq dlq: Redis at REDIS_URL={full.url!r} answered but would not run "
                    "the command: max number of clients reached: it has as many connections "
                    "as its maxclients setting allows; raise it, or stop what holds "
                    "connections idle")


@pytest.mark.parametrize(("argv", "variable", "said"), [
    (["-c", "9000"], ("TASKQ_PREFETCH", "5000"),
     "--concurrency 9000 and TASKQ_PREFETCH=5000 must be"),
    (["--prefetch", "5000"], ("TASKQ_CONCURRENCY", "9000"),
     "TASKQ_CONCURRENCY=9000 and --prefetch 5000 must be"),
])
def test_a_worker_option_that_clashes_with_a_variable_names_each_as_it_was_set(
    argv: list[str], variable: tuple[str, str], said: str, nowhere: str
) -> None:
    """It named both as variables, one of which the user had given as an option."""
    env = command_env(REDIS_URL=nowhere, **dict([variable]))
    line = one_line(taskq("worker", *argv, env=env, timeout=60))
    assert line == f"taskq worker: {said} at most 10,000 together, not 14,000"


@pytest.mark.parametrize(("argv", "variables"), [
    (["-c", "8", "--prefetch", "2"], {"TASKQ_CONCURRENCY": "9000", "TASKQ_PREFETCH": "5000"}),
    (["-c", "4"], {"TASKQ_CONCURRENCY": "0"}),
    (["-c", "4"], {"TASKQ_CONCURRENCY": "abc"}),
], ids=["pair-overridden", "bad-variable-overridden", "no-number-overridden"])
def test_variables_the_worker_options_override_are_not_held_against_them(
    argv: list[str], variables: dict[str, str], nowhere: str
) -> None:
    """The options' check read the environment's own values, and refused a valid
    command for variables it overrode: here it goes on to look for Redis."""
    line = one_line(taskq("worker", *argv, env=command_env(REDIS_URL=nowhere, **variables),
                          timeout=60))
    assert "REDIS_URL" in line and "TASKQ_" not in line, line
