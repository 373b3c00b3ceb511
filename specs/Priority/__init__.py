"""Priorities within a queue (Priority) and its mutants, in TLA+ and Python."""
