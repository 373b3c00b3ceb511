"""A sharded queue (Shards: tasks routed to shards by key or id, the shards taking turns
in each worker) and its mutants, in TLA+ and Python."""
