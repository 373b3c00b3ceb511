"""The change feed as built (TaskFeed) and its split-attach mutant, in TLA+ and Python."""
