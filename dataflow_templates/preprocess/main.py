"""Flex Template entry point (FLEX_TEMPLATE_PYTHON_PY_FILE): `lmshards preprocess` with the launcher's flags.

Not preprocess/__main__.py run as a file: that would put preprocess/ itself on sys.path, and its
tokenize.py would shadow the standard library's tokenize module.
"""

import sys

from preprocess.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
