import sys

from lmshards.cli import main

sys.exit(main())
