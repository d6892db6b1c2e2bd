"""`python -m train ...` runs `lmshards train ...`."""

import sys

from train.commands.cli import main

sys.exit(main(sys.argv[1:]))
