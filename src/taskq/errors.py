"""The one error hierarchy every taskq failure belongs to."""

from __future__ import annotations


class TaskqError(Exception):
    """Raised when anything in taskq fails; the root of every taskq error."""


class ConfigError(TaskqError):
    """Raised when an environment variable or option has a value taskq cannot use."""


class InvalidTaskError(TaskqError):
    """Raised when a task cannot be enqueued as given (bad id, name, delay or retries)."""


class PayloadError(InvalidTaskError):
    """Raised when a payload cannot be encoded as JSON or decoded back."""


class PayloadTooLargeError(PayloadError):
    """Raised when an encoded payload exceeds the configured size limit."""


class UnknownTaskError(TaskqError):
    """Raised when a worker leases a task whose name no registered function has."""


class BrokerError(TaskqError):
    """Raised when Redis cannot be reached or answers an operation with an error."""


class UnsafeRedisError(BrokerError):
    """Raised when the Redis server is configured in a way that could lose queue keys."""


class EmbeddedRedisError(TaskqError):
    """Raised when the embedded redis-server cannot be found or started."""


class LedgerError(TaskqError):
    """Raised when the SQLite ledger is misconfigured or cannot be written."""
