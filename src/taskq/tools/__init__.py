"""What demonstrates and verifies taskq, apart from the queue itself: an embedded Redis
and a local cluster, the seed's simulated task and its SQLite ledger, the demo, the
chaos run and the validation of real event logs against the models."""
