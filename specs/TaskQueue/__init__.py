"""taskq's lease protocol (TaskQueue) and its mutants, in TLA+ and Python."""
