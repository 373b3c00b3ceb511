"""TLA+ models of taskq and its seeds, explored by a small Python model checker."""
