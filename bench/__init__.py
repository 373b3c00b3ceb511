"""The taskq benchmarks of issue 7.

    .venv/bin/pip install -e '.[bench]'      # the peers and py-spy
    .venv/bin/python -m bench                # everything: about 10 minutes on 2 cores
    .venv/bin/python -m bench --quick --only enqueue,drain --repeats 1

One module per measurement (enqueue, drain, latency, feed, ceiling, peers/, profile),
all against one private redis-server the bench starts; `python -m bench` prints the
tables and writes docs/benchmarks.md with the targets judged.
"""
