"""Flex Template entry point (FLEX_TEMPLATE_PYTHON_PY_FILE): `lmshards preprocess` with the launcher's flags.

Not lmshards/preprocess/__main__.py run as a file: that would put preprocess/ itself on sys.path, where its
module names (cli, options, pipeline, ...) would shadow any top-level module of the same name.
"""

import sys

from lmshards.preprocess.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
