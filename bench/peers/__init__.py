"""The peers taskq is measured against, each on the bench's Redis with the same no-op.

One module per peer (`<peer>_app.py`) defines its no-op task, counted by
`counter.py` so a lost or doubled run shows, and `enqueue(n)`, one call per task, which
`client.py` times; `taskq_app.py` gives taskq's `Task.enqueue` the same client. These
modules import only their own framework and the standard library: `arq_app` runs in a
venv of its own. `driver.py` runs them.
"""
