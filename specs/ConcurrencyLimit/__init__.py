"""Concurrency limits across workers (ConcurrencyLimit: slots taken in lease.lua, given
back by the fenced end of a lease) and its mutants, in TLA+ and Python."""
