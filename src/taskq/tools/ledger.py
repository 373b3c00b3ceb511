"""A SQLite stand-in for a downstream system, with guards against duplicate charges."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from taskq.errors import LedgerError
from taskq.settings import LEDGER_GUARDS, LEDGER_PATH_RULE, LedgerGuard, shared_ledger_path

ChargeOutcome = Literal["applied", "duplicate", "fenced"]

# The largest charge either way: SQLite keeps integers in 64 bits.
MAX_AMOUNT = 2**63 - 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS charges (
    id       INTEGER PRIMARY KEY,
    task_id  TEXT    NOT NULL,
    token    INTEGER NOT NULL,
    account  TEXT    NOT NULL,
    amount   INTEGER NOT NULL,
    at       TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE INDEX IF NOT EXISTS charges_by_task ON charges (task_id);
CREATE TABLE IF NOT EXISTS applied (task_id TEXT PRIMARY KEY, token INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS fences  (task_id TEXT PRIMARY KEY, token INTEGER NOT NULL);
"""


@dataclass(frozen=True)
class LedgerSummary:
    """Totals of the ledger, and every task charged more than once with its count."""

    charges: int
    tasks: int
    amount: int
    charged_twice: list[tuple[str, int]]


@dataclass(frozen=True)
class Charge:
    """One charge: the task and fencing token it was made for, and when it was written
    (ms since the epoch, by the clock of the host that wrote it; SQLite's, to the ms)."""

    task_id: str
    token: int
    at_ms: int


def _epoch_ms(at: str) -> int:
    """The ms since the epoch of a charge's `at` column (UTC, as SCHEMA writes it)."""
    moment = datetime.strptime(at, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    return round(moment.timestamp() * 1000)


class Ledger:
    """Charges accounts for tasks. The guard decides what a second charge for a task does:

    - `none`: nothing stops it; a task that runs twice charges twice.
    - `dedupe`: the charge and a record of the task commit together; a repeat is a no-op.
    - `fence`: a charge with a token older than the newest one seen for the task is
      refused; an older token that writes first still gets through.
    """

    def __init__(self, path: str | Path, guard: LedgerGuard = "dedupe",
                 create: bool = True) -> None:
        """The ledger at `path`, its tables made if missing; with `create` False (a
        reader's), only an existing ledger: a mistyped path is an error, not an empty
        ledger."""
        if guard not in LEDGER_GUARDS:
            raise LedgerError(f"unknown ledger guard {guard!r}: use one of {LEDGER_GUARDS}")
        self.path = str(path)
        if not shared_ledger_path(self.path):
            raise LedgerError(f"ledger path {self.path!r}: give {LEDGER_PATH_RULE}")
        if not create and not Path(self.path).is_file():
            raise LedgerError(f"no ledger at {self.path}: check --path (or LEDGER_PATH) "
                              "and the directory it is run from")
        self.guard = guard
        self._reader = not create
        self._local = threading.local()
        try:
            if create:
                self._db().executescript(SCHEMA)
            elif not self._db().execute("SELECT 1 FROM sqlite_master WHERE type = 'table' "
                                        "AND name = 'charges'").fetchone():
                raise LedgerError(f"{self.path} is no taskq ledger: it has no charges table")
        except sqlite3.Error as e:
            what = "create the ledger tables in" if create else "read the ledger"
            raise LedgerError(f"cannot {what} {self.path}: {e}") from e

    def _db(self) -> sqlite3.Connection:
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            try:
                if self._reader:  # it writes nothing: a read-only copy can be audited
                    uri = f"{Path(self.path).resolve().as_uri()}?mode=ro"
                    db = sqlite3.connect(uri, timeout=60, isolation_level=None, uri=True)
                else:
                    db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
                    db.execute("PRAGMA journal_mode=WAL")
                    db.execute("PRAGMA synchronous=NORMAL")
            except sqlite3.Error as e:
                raise LedgerError(f"cannot open ledger {self.path}: {e}") from e
            self._local.db = db
        return db

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db())

    def charge(self, task_id: str, token: int, account: str, amount: int) -> ChargeOutcome:
        """Charge `amount` to `account` on behalf of `task_id` holding `token`; a
        LedgerError, with nothing written, for a value the ledger cannot keep."""
        _check_charge(task_id, token, account, amount)
        with self._transaction() as db:
            if self.guard == "dedupe":
                seen = db.execute("SELECT 1 FROM applied WHERE task_id = ?", (task_id,))
                if seen.fetchone():
                    return "duplicate"
                db.execute("INSERT INTO applied VALUES (?, ?)", (task_id, token))
            elif self.guard == "fence":
                row = db.execute("SELECT token FROM fences WHERE task_id = ?", (task_id,))
                newest = row.fetchone()
                if newest and token < newest[0]:
                    return "fenced"
                db.execute("INSERT OR REPLACE INTO fences VALUES (?, ?)", (task_id, token))
            db.execute(
                "INSERT INTO charges (task_id, token, account, amount) VALUES (?, ?, ?, ?)",
                (task_id, token, account, amount),
            )
        return "applied"

    def summary(self) -> LedgerSummary:
        """The ledger's totals; a LedgerError when the file cannot be read as one (a
        damaged ledger must not read as tasks charged twice)."""
        with _reading(self.path):
            db = self._db()
            charges, tasks = db.execute(
                "SELECT COUNT(*), COUNT(DISTINCT task_id) FROM charges").fetchone()
            # Summed here: charges each within 64 bits may add up past them, where
            # SQLite's SUM fails.
            amount = sum(a for (a,) in db.execute("SELECT amount FROM charges"))
            twice = db.execute(
                "SELECT task_id, COUNT(*) FROM charges GROUP BY task_id HAVING COUNT(*) > 1 "
                "ORDER BY COUNT(*) DESC, task_id"
            ).fetchall()
        return LedgerSummary(charges, tasks, amount, [(t, n) for t, n in twice])

    def charges_by_task(self, prefix: str) -> dict[str, int]:
        """How many charges each task whose id starts with `prefix` made."""
        rows = self._db().execute(
            "SELECT task_id, COUNT(*) FROM charges WHERE substr(task_id, 1, ?) = ? "
            "GROUP BY task_id", (len(prefix), prefix))
        return {task_id: count for task_id, count in rows.fetchall()}

    def charges_of(self, task_ids: Collection[str]) -> list[Charge]:
        """Every charge made for one of `task_ids`, in the order they were written."""
        ids, found = sorted(set(task_ids)), []
        for start in range(0, len(ids), 500):  # SQLite caps a statement's parameters
            chunk = ids[start:start + 500]
            rows = self._db().execute(
                f"SELECT task_id, token, at FROM charges WHERE task_id IN "
                f"({', '.join('?' * len(chunk))})", chunk)
            found += [Charge(t, int(k), _epoch_ms(at)) for t, k, at in rows.fetchall()]
        return sorted(found, key=lambda c: (c.at_ms, c.task_id))

    def charges_for(self, task_id: str) -> int:
        row = self._db().execute("SELECT COUNT(*) FROM charges WHERE task_id = ?", (task_id,))
        count: int = row.fetchone()[0]
        return count

    def close(self) -> None:
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None


def _check_charge(task_id: object, token: object, account: object, amount: object) -> None:
    for name, text in (("task id", task_id), ("account", account)):
        if not isinstance(text, str):
            raise LedgerError(f"a charge's {name} must be text, not {type(text).__name__}")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise LedgerError(f"a charge's {name} cannot be stored: {e.reason}") from e
    for name, number, low in (("token", token, 0), ("amount", amount, -MAX_AMOUNT)):
        if isinstance(number, bool) or not isinstance(number, int) \
                or not low <= number <= MAX_AMOUNT:
            raise LedgerError(f"a charge's {name} must be a whole number from {low} to "
                              f"{MAX_AMOUNT}, not {number!r:.40}")


class _reading:  # lower case: it reads as a function at every `with`
    """Turns SQLite's errors while reading the ledger at `path` into LedgerError."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if isinstance(exc, sqlite3.Error):
            raise LedgerError(f"cannot read the ledger {self.path}: {exc}") from exc


class _Transaction:
    """BEGIN IMMEDIATE … COMMIT, so concurrent workers serialize their check-and-write."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> sqlite3.Connection:
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as e:
            raise LedgerError(f"cannot start a ledger transaction: {e}") from e
        return self.db

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            self.db.execute("ROLLBACK" if exc_type else "COMMIT")
        except sqlite3.Error as e:
            raise LedgerError(f"cannot finish a ledger transaction: {e}") from e
        if isinstance(exc, sqlite3.Error):
            raise LedgerError(f"ledger write failed: {exc}") from exc
