"""`python -m train ...` runs `lmshards train ...`.

A script, not a module anything imports: it runs the command module as `__main__` (runpy) rather than
importing it, because the package root is the layer every subpackage of train/ builds on (config,
run_dir) and so imports none of them.
"""

import runpy

runpy.run_module("train.commands.cli", run_name="__main__", alter_sys=True)
