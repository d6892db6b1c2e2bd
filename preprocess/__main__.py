"""`python -m preprocess ...`: the same as `lmshards preprocess ...` (how Beam users launch pipelines)."""

import sys

from preprocess.cli import main

sys.exit(main())
