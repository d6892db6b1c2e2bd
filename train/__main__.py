"""`python -m train ...` runs `lmshards train ...`."""

import sys

from train.cli import main

sys.exit(main(sys.argv[1:]))
