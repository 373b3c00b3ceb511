"""How a producer waits for a task's result (ResultWait) and its mutants, in TLA+ and Python."""
