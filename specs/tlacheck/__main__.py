"""Entry point: `python -m specs.tlacheck [model ...]` checks the specs/ catalogue."""

import sys

from specs.catalog import CHECKS, ROOT

from .cli import main

sys.exit(main(sys.argv[1:], CHECKS, ROOT))
