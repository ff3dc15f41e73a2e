"""``python -m mpiec.simulate ARGS``: the same as ``mpiec simulate ARGS``."""

import sys

from .cli import main

sys.exit(main(sys.argv[1:]))
