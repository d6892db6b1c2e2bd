import sys

from lmshards.command.cli import main

sys.exit(main())
