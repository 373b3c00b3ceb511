"""Rate limits across workers (RateLimit, GCRA in lease.lua) and its mutants, in TLA+ and Python."""
