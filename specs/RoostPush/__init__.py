"""The RoostPush resumable change feed and its split-attach mutant, in TLA+ and Python."""
