"""`python -m lmshards.preprocess ...`: the same as `lmshards preprocess ...` (how Beam users launch pipelines)."""

import sys

from lmshards.preprocess.cli import main

sys.exit(main())
