"""The version of taskq, in one place (pyproject.toml says the same)."""

__version__ = "0.1.0"
