"""Flex Template entry point: `lmshards preprocess` with the launcher's --name=value parameters."""

import sys

from preprocess.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
