"""The one place taskq reads its configuration from the environment."""

from __future__ import annotations

import codecs
import math
import os
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal, TypeVar
from urllib.parse import parse_qs, urlsplit

import redis

from taskq import limits
from taskq.errors import ConfigError, InvalidTaskError
from taskq.keys import check_queue_name

LedgerGuard = Literal["none", "dedupe", "fence"]
LEDGER_GUARDS: tuple[LedgerGuard, ...] = ("none", "dedupe", "fence")

T = TypeVar("T")


@dataclass(frozen=True)
class Settings:
    """Every tunable of the queue, its workers and its server; build it with
    `Settings.from_env()` and pass it down."""

    redis_url: str = "redis://localhost:6379/0"
    redis_timeout_seconds: float = 5.0
    queue: str = "default"
    # Each number's default and range are in taskq.limits (limits.SETTINGS).
    lease_seconds: float = limits.LEASE_SECONDS.default
    backoff_base_seconds: float = limits.BACKOFF_BASE.default
    backoff_max_seconds: float = limits.BACKOFF_MAX.default
    poll_seconds: float = limits.POLL_SECONDS.default
    shutdown_grace_seconds: float = limits.SHUTDOWN_GRACE.default
    time_limit_seconds: float = limits.TIME_LIMIT.default
    concurrency: int = limits.CONCURRENCY.default
    prefetch: int = limits.PREFETCH.default
    worker_processes: int = limits.WORKER_PROCESSES.default
    shards: int = limits.SHARDS.default
    events_retention: int = limits.EVENTS_RETENTION.default
    max_payload_bytes: int = limits.MAX_PAYLOAD_BYTES.default
    max_result_bytes: int = limits.MAX_RESULT_BYTES.default
    idempotency_ttl_seconds: int = limits.IDEMPOTENCY_TTL.default
    completed_ttl_seconds: float = limits.COMPLETED_TTL.default
    dead_ttl_seconds: float = limits.DEAD_TTL.default
    redis_server: str = ""
    api_token: str = ""
    allowed_hosts: str = ""
    feed_heartbeat_seconds: float = limits.FEED_HEARTBEAT.default
    feed_send_timeout_seconds: float = limits.FEED_SEND_TIMEOUT.default
    feed_max_queues: int = limits.FEED_MAX_QUEUES.default
    request_timeout_seconds: float = limits.REQUEST_TIMEOUT.default
    producer_retry_seconds: float = limits.PRODUCER_RETRY.default
    redis_cluster: bool = False
    # A log line per finished run of a task (see taskq.worker.tasklog).
    task_log: bool = True
    redis_url_given: bool = False

    def __post_init__(self) -> None:
        _check_kinds(self, ENVIRONMENT)
        _check_ranges(self, limits.SETTINGS, ENVIRONMENT)
        _check_redis_url(self.redis_url)
        try:
            check_queue_name(self.queue)
        except InvalidTaskError as e:
            raise ConfigError(f"TASKQ_QUEUE={limits.shown(self.queue)}: {e}") from None
        _check(
            self.backoff_max_seconds >= self.backoff_base_seconds,
            "BACKOFF_MAX_SECONDS",
            self.backoff_max_seconds,
            f"must be >= BACKOFF_BASE_SECONDS ({self.backoff_base_seconds!r})",
        )
        # A worker leases up to both in one call.
        _check(
            self.concurrency + self.prefetch <= limits.LEASE_COUNT.high,
            "TASKQ_PREFETCH",
            self.prefetch,
            f"must leave TASKQ_CONCURRENCY ({self.concurrency}) + TASKQ_PREFETCH at most "
            f"{limits.LEASE_COUNT.high:,}",
        )

    def __repr__(self) -> str:
        # A repr lands in logs, tracebacks and bug reports: the password in REDIS_URL and
        # the API token are shown as *** there.
        shown = {f.name: getattr(self, f.name) for f in fields(self) if f.repr}
        shown["redis_url"] = redacted_url(self.redis_url)
        if self.api_token:
            shown["api_token"] = "***"
        return f"Settings({', '.join(f'{k}={v!r}' for k, v in shown.items())})"

    @property
    def heartbeat_seconds(self) -> float:
        """A lease survives two missed heartbeats."""
        return self.lease_seconds / 3

    @property
    def lease_ms(self) -> int:
        return max(1, round(self.lease_seconds * 1000))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: object) -> Settings:
        """Read every variable of `ENVIRONMENT` (or `environ`) but those `overrides` set,
        then apply `overrides`: a variable an option overrides is not held against it."""
        values = {**_read(ENVIRONMENT, environ, skip=overrides), **overrides}
        values.setdefault("redis_url_given", "redis_url" in values)
        return _build(cls, values, {})


@dataclass(frozen=True)
class Simulation:
    """The seed's simulated task (`taskq.simulate`): how long it works before and after its
    side effect, how often it fails, and the SQLite ledger it charges, with which guard."""

    # Each number's default and range are in taskq.limits (limits.SIMULATION).
    work_seconds: float = limits.WORK_SECONDS.default
    after_effect_seconds: float = limits.AFTER_EFFECT_SECONDS.default
    fail_rate: float = limits.FAIL_RATE.default
    ledger_path: str = "ledger.db"
    ledger_guard: LedgerGuard = "dedupe"

    def __post_init__(self) -> None:
        _check_ranges(self, limits.SIMULATION, SIMULATION_ENVIRONMENT)
        _check(
            self.ledger_guard in LEDGER_GUARDS,
            "LEDGER_GUARD",
            self.ledger_guard,
            f"must be one of {', '.join(LEDGER_GUARDS)}",
        )
        _check(shared_ledger_path(self.ledger_path), "LEDGER_PATH", self.ledger_path,
               f"must be {LEDGER_PATH_RULE}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None,
                 **overrides: object) -> Simulation:
        """Read every variable of `SIMULATION_ENVIRONMENT` (or `environ`), then apply
        `overrides`."""
        return _build(cls, _read(SIMULATION_ENVIRONMENT, environ, skip=overrides), overrides)


# What a ledger path must be; SQLite opens a path it is given as a file, but ":memory:"
# as a database of the connection's own, which no other thread or process sees.
LEDGER_PATH_RULE = ("the path of a file every worker process opens (SQLite's :memory: "
                    "gives each connection a database of its own)")


def shared_ledger_path(path: str) -> bool:
    """Whether every connection to `path` opens the same ledger (LEDGER_PATH_RULE)."""
    return bool(path.strip()) and path != ":memory:"


Config = TypeVar("Config", Settings, Simulation)


def _read(table: Mapping[str, tuple[str, Callable[[str], object]]],
          environ: Mapping[str, str] | None,
          skip: Collection[str] = ()) -> dict[str, object]:
    env = os.environ if environ is None else environ
    values: dict[str, object] = {}
    for name, (variable, parse) in table.items():
        if name in skip:
            continue
        raw = env.get(variable)
        if raw is not None and raw.strip() != "":
            values[name] = _parse(variable, raw.strip(), parse)
    return values


def variable_value(field: str, environ: Mapping[str, str] | None = None) -> object | None:
    """The value the environment gives the setting `field` alone (None when its variable
    is unset), or ConfigError naming the variable: a check of options against the
    setting they do not override reads no other."""
    return _read({field: ENVIRONMENT[field]}, environ).get(field)


def _build(cls: type[Config], values: dict[str, object],
           overrides: Mapping[str, object]) -> Config:
    values.update(overrides)
    unknown = set(values) - {f.name for f in fields(cls)}
    if unknown:
        raise ConfigError(f"unknown settings: {', '.join(sorted(unknown))}")
    return cls(**values)  # type: ignore[arg-type]


def child_environment(settings: Settings, simulation: Simulation | None = None,
                      **variables: str) -> dict[str, str]:
    """The environment of a taskq child process (`taskq worker`, `taskq serve`): this
    process's, with every value of `settings` (and `simulation`) written as its variable,
    then `variables` by name. Every command that starts taskq processes builds it here."""
    env = dict(os.environ)
    tables: list[tuple[object, Mapping[str, tuple[str, Callable[[str], object]]]]] = [
        (settings, ENVIRONMENT)]
    if simulation is not None:
        tables.append((simulation, SIMULATION_ENVIRONMENT))
    for config, table in tables:
        for name, (variable, _) in table.items():
            value = getattr(config, name)
            env[variable] = ("1" if value else "0") if isinstance(value, bool) else str(value)
    env.update(variables)
    return env


def _check_ranges(config: object, ranges: Mapping[str, limits.Range[int] | limits.Range[float]],
                  table: Mapping[str, tuple[str, Callable[[str], object]]]) -> None:
    """Every number of `config` in its range, or ConfigError naming its variable."""
    for name, bound in ranges.items():
        value = getattr(config, name)
        _check(bound.holds(value), table[name][0], value, f"must be {bound.rule}")


def _check_kinds(config: object, table: Mapping[str, tuple[str, Callable[[str], object]]]
                 ) -> None:
    """Every flag of `config` a bool and every text a str (as an override may give them:
    the string '0' would read as a true flag), or ConfigError naming its variable."""
    for field in fields(config):  # type: ignore[arg-type]
        value, variable = getattr(config, field.name), table.get(field.name, (field.name,))[0]
        if isinstance(field.default, bool):
            _check(isinstance(value, bool), variable, value, "must be True or False")
        elif isinstance(field.default, str):
            _check(isinstance(value, str), variable, value, "must be text")


def _check(ok: bool, variable: str, value: object, rule: str) -> None:
    if not ok:
        raise ConfigError(f"{variable}={limits.shown(value)} {rule}")


def _parse(variable: str, raw: str, parse: Callable[[str], T]) -> T:
    try:
        return parse(raw)
    except ValueError as e:
        raise ConfigError(f"{variable}={raw!r} is not valid: {e}") from e


def _guard(raw: str) -> LedgerGuard:
    if raw not in LEDGER_GUARDS:
        raise ValueError(f"expected one of {', '.join(LEDGER_GUARDS)}")
    return LEDGER_GUARDS[LEDGER_GUARDS.index(raw)]


def _flag(raw: str) -> bool:
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    if raw.lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected 1/true/yes/on or 0/false/no/off")


def _plain(raw: str) -> str:
    """`raw` if it is written as a reviewer of a config reads a number: Python also
    takes '١٢' and '1_0', which no one would take for 12 and 10 at a glance."""
    if not raw.isascii() or "_" in raw:
        raise ValueError("expected a number in ASCII digits, with no '_'")
    return raw


def _whole(raw: str) -> int:
    return int(_plain(raw))


def _finite(raw: str) -> float:
    value = float(_plain(raw))
    if not math.isfinite(value):
        raise ValueError("expected a finite number")
    return value


REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
URL_TIMEOUTS = ("socket_timeout", "socket_connect_timeout")
# How replies are decoded: taskq's to set (taskq.connection), not a URL's.
TEXT_OPTIONS = ("encoding", "encoding_errors", "decode_responses")


def _scheme_problem(url: str) -> str:
    """What is wrong with the scheme of `url` (which has none of ours), and the URL it
    most likely meant."""
    # A scheme is a word and a colon, then a slash unless it is one of ours not followed
    # by a port: "localhost:6379" and "redis:6379" (a compose service) name hosts.
    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*):(/*)(.*)", url)
    if scheme is not None and not scheme.group(2) and (
            scheme.group(1).lower() + "://" not in REDIS_SCHEMES
            or scheme.group(3)[:1].isdigit()):
        scheme = None
    if scheme is None:
        problem, fixed = "has no scheme", f"redis://{url}"
    elif scheme.group(1).lower() + "://" in REDIS_SCHEMES:
        name = scheme.group(1).lower()
        problem = f"does not start with {name}://"
        fixed = f"{name}:///{scheme.group(3)}" if name == "unix" else \
            f"{name}://{scheme.group(3)}"
    else:
        problem = f"has the unknown scheme {scheme.group(1)}://"
        fixed = f"redis://{scheme.group(3)}"
    return (f"REDIS_URL={redacted_url(url)!r} {problem}: write it as {redacted_url(fixed)} "
            "(rediss:// for TLS, unix:///path/to/redis.sock for a socket)")


def _check_redis_url(url: str) -> None:
    """Refuse, naming the variable, a URL redis-py could not use: here, once, rather than
    with a bare ValueError wherever a client is made."""
    if not url.startswith(REDIS_SCHEMES):
        raise ConfigError(_scheme_problem(url))
    try:
        pool = redis.ConnectionPool.from_url(url)  # parses the URL; connects only when used
    except ValueError as e:
        raise ConfigError(f"REDIS_URL={redacted_url(url)!r} is not a Redis URL redis-py "
                          f"can use: {e}") from e
    try:
        # A query parameter redis-py's parser passes on but no connection takes (a
        # typo, or a client option), or one it refuses (protocol=4), fails only here;
        # this connects to nothing.
        pool.connection_class(**pool.connection_kwargs)
    except TypeError as e:
        unknown = re.search(r"argument '(\w+)'", str(e))
        what = f"the parameter {unknown.group(1)}" if unknown else "a parameter"
        raise ConfigError(f"REDIS_URL={redacted_url(url)!r} has {what}, which a Redis "
                          "connection does not take: leave it out") from None
    except (ValueError, redis.RedisError) as e:
        raise ConfigError(f"REDIS_URL={redacted_url(url)!r} is not a Redis URL redis-py "
                          f"can use: {e}") from None
    _check_url_values(url, pool.connection_kwargs)


def _check_url_values(url: str, kwargs: dict[str, Any]) -> None:
    """Refuse a URL whose values (parsed into `kwargs`) redis-py takes but Redis or a
    socket would refuse only at the first command, with a message naming no URL."""
    # redis-py reads a path that is no database number ("/analytics", "/0/x") as no
    # database at all, and the client would use database 0 without a word.
    path = "" if url.startswith("unix://") else urlsplit(url).path.strip("/")
    if path and not (path.isascii() and path.isdigit()):
        raise ConfigError(f"REDIS_URL={redacted_url(url)!r} names the database "
                          f"{path!r}: Redis databases are numbers (redis://host:6379/0)")
    # Redis reads a database number past its int range as "not an integer", which
    # would say nothing of the URL.
    db = kwargs.get("db", 0)
    if isinstance(db, int) and not 0 <= db < 2**31:
        raise ConfigError(f"REDIS_URL={redacted_url(url)!r} names database {db}: Redis "
                          "counts its databases from 0, as many as its `databases` setting")
    # redis-py takes ?db= over the path without a word: two databases named is one too
    # many to guess which was meant.
    if path and db != int(path):
        raise ConfigError(f"REDIS_URL={redacted_url(url)!r} names database {path} in its "
                          f"path and {db} in ?db=: name it once")
    # A negative interval fails every command with an error about a MAINT_NOTIFICATIONS
    # subcommand (redis-py 8), which would say nothing of the URL either.
    interval = kwargs.get("health_check_interval")
    if interval is not None and not (math.isfinite(interval) and interval >= 0):
        raise ConfigError(f"REDIS_URL={redacted_url(url)!r} has health_check_interval="
                          f"{interval}: give a number of seconds, 0 or more, or leave it out")
    _check_url_text(url, kwargs)
    # The URL's own timeouts win over REDIS_TIMEOUT_SECONDS, and a socket refuses
    # a negative or NaN one only when the first connection is made.
    for name in URL_TIMEOUTS:
        value = kwargs.get(name)
        if value is not None and not (math.isfinite(value) and value > 0):
            raise ConfigError(f"REDIS_URL={redacted_url(url)!r} has {name}={value}: give a "
                              "number of seconds above 0, or leave it out")


def _check_url_text(url: str, kwargs: dict[str, Any]) -> None:
    """Refuse a URL's client name Redis would refuse, and its own say in how replies are
    decoded."""
    # Redis refuses a name with a space or a character past ASCII at the first command,
    # with an error that names no URL.
    name = kwargs.get("client_name")
    if name is not None and not all("!" <= c <= "~" for c in str(name)):
        raise ConfigError(f"REDIS_URL={redacted_url(url)!r} has client_name={name!r}: Redis "
                          "takes names of printable ASCII characters with no space")
    # redis-py takes these from the query over taskq's own client options: replies read
    # in another encoding than the UTF-8 every value is written in would garble every
    # text that is not ASCII, arguments and results, with no error anywhere.
    query = parse_qs(urlsplit(url).query)
    for option in TEXT_OPTIONS:
        for value in query.get(option, []):  # redis-py takes the first of several
            if not (option == "encoding" and _is_utf8(value)):
                raise ConfigError(f"REDIS_URL={redacted_url(url)!r} sets {option}={value}: "
                                  "taskq writes every value as UTF-8 and decodes the "
                                  "replies itself; leave it out")


def _is_utf8(encoding: str) -> bool:
    """Whether `encoding` names UTF-8 (utf-8, UTF8, utf_8, ...)."""
    try:
        return codecs.lookup(encoding).name == "utf-8"
    except LookupError:
        return False


def redacted_url(url: str) -> str:
    """`url` with its password (`user:password@` or `?password=`) shown as ***."""
    scheme, sep, rest = url.rpartition("://")
    end = min([i for i in map(rest.find, "/?#") if i >= 0] or [len(rest)])
    userinfo, at, host = rest[:end].rpartition("@")
    if at and ":" in userinfo:
        rest = f"{userinfo.partition(':')[0]}:***@{host}{rest[end:]}"
    path, mark, query = rest.partition("?")
    if mark:
        pairs = ("password=***" if p.startswith("password=") else p for p in query.split("&"))
        rest = f"{path}?{'&'.join(pairs)}"
    return f"{scheme}{sep}{rest}"


# attribute -> (environment variable, parser); the README's table lists the same names.
ENVIRONMENT: dict[str, tuple[str, Callable[[str], object]]] = {
    "redis_url": ("REDIS_URL", str),
    "redis_timeout_seconds": ("REDIS_TIMEOUT_SECONDS", _finite),
    "queue": ("TASKQ_QUEUE", str),
    "lease_seconds": ("LEASE_SECONDS", _finite),
    "backoff_base_seconds": ("BACKOFF_BASE_SECONDS", _finite),
    "backoff_max_seconds": ("BACKOFF_MAX_SECONDS", _finite),
    "poll_seconds": ("POLL_SECONDS", _finite),
    "shutdown_grace_seconds": ("SHUTDOWN_GRACE_SECONDS", _finite),
    "time_limit_seconds": ("TASKQ_TIME_LIMIT_SECONDS", _finite),
    "concurrency": ("TASKQ_CONCURRENCY", _whole),
    "prefetch": ("TASKQ_PREFETCH", _whole),
    "worker_processes": ("TASKQ_WORKER_PROCESSES", _whole),
    "shards": ("TASKQ_SHARDS", _whole),
    "events_retention": ("TASKQ_EVENTS_RETENTION", _whole),
    "max_payload_bytes": ("TASKQ_MAX_PAYLOAD_BYTES", _whole),
    "max_result_bytes": ("TASKQ_MAX_RESULT_BYTES", _whole),
    "idempotency_ttl_seconds": ("TASKQ_IDEMPOTENCY_TTL_SECONDS", _whole),
    "completed_ttl_seconds": ("TASKQ_COMPLETED_TTL_SECONDS", _finite),
    "dead_ttl_seconds": ("TASKQ_DEAD_TTL_SECONDS", _finite),
    "redis_server": ("REDIS_SERVER", str),
    "redis_cluster": ("TASKQ_REDIS_CLUSTER", _flag),
    "task_log": ("TASKQ_TASK_LOG", _flag),
    "api_token": ("TASKQ_API_TOKEN", str),
    "allowed_hosts": ("TASKQ_ALLOWED_HOSTS", str),
    "feed_heartbeat_seconds": ("TASKQ_FEED_HEARTBEAT_SECONDS", _finite),
    "feed_send_timeout_seconds": ("TASKQ_FEED_SEND_TIMEOUT_SECONDS", _finite),
    "feed_max_queues": ("TASKQ_FEED_MAX_QUEUES", _whole),
    "request_timeout_seconds": ("TASKQ_REQUEST_TIMEOUT_SECONDS", _finite),
    "producer_retry_seconds": ("TASKQ_PRODUCER_RETRY_SECONDS", _finite),
}

SIMULATION_ENVIRONMENT: dict[str, tuple[str, Callable[[str], object]]] = {
    "work_seconds": ("WORK_SECONDS", _finite),
    "after_effect_seconds": ("AFTER_EFFECT_SECONDS", _finite),
    "fail_rate": ("FAIL_RATE", _finite),
    "ledger_path": ("LEDGER_PATH", str),
    "ledger_guard": ("LEDGER_GUARD", _guard),
}
