"""What the local Dask cluster's fork server imports once before it forks each worker.

Imported only there (lmshards.preprocess.dask_runner.WORKER_PRELOAD): the fork server is a process of its
own, so what its imports create is frozen out of the garbage collector's reach (frozen_imports), and
every worker forked from it starts with that heap frozen: neither walks it again.
"""

from lmshards.plumbing.memory import freeze_imports_here, frozen_imports

freeze_imports_here()
with frozen_imports():
    import apache_beam  # noqa: F401
    import distributed  # noqa: F401
    import tokenizers  # noqa: F401

    import lmshards.preprocess.pipeline  # noqa: F401
