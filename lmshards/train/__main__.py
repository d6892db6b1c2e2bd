"""`python -m lmshards.train ...` runs `lmshards train ...`."""

import sys

from lmshards.train.commands.cli import main

sys.exit(main(sys.argv[1:]))
