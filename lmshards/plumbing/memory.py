"""Handing freed memory back to the system, and keeping the garbage collector off the startup heap."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import gc
from collections.abc import Iterator

# The collector's first generation after the startup heap is frozen: a pass per this many new tracked
# objects instead of Python's 700. Every tokenizer call makes a list per document, so the default set
# off a pass every few hundred documents (5,400 passes, 0.35 s of the benchmark corpus' run); the
# objects a pass would find in a cycle are few, and this bounds them.
YOUNG_COLLECTION_OBJECTS = 10_000


@functools.cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


def release_free_memory() -> bool:
    """Hands the free pages of every malloc heap back to the system (glibc's malloc_trim); returns
    whether any were. Where the C library is not glibc, does nothing and returns False.

    Why: glibc keeps freed memory in its heaps for reuse and returns only what sits at a heap's top.
    A long run of threads that allocate what others free (the tokenizer's threads build each call's
    Encodings, another thread frees them) leaves free pages scattered through several heaps, and
    the resident size creeps up with the input although the live data does not grow.
    """
    libc = _libc()
    if libc is None or not hasattr(libc, "malloc_trim"):
        return False
    return bool(libc.malloc_trim(0))


@functools.cache
def freeze_startup_heap() -> None:
    """Collects once, then moves every object alive now out of the garbage collector's reach (gc.freeze),
    once per process: call it when a worker is ready to tokenize.

    Why: each tokenizer call makes an object per document, so the collector runs thousands of times,
    and each full collection walks every object of the process: in a Beam worker, its imported
    modules (about 200,000 objects). Frozen, they are no longer walked; they are still freed when no
    longer referenced. Measured on a staged worker of the benchmark corpus: 0.64 s in the collector,
    0.17 s frozen (docs/benchmarks.md). The young generation is then collected less often
    (YOUNG_COLLECTION_OBJECTS).
    """
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_OBJECTS, older, oldest)


_imports_frozen = [False]  # set by the command line's process (freeze_imports_here)


def freeze_imports_here() -> None:
    """From now on in this process, frozen_imports freezes what its block creates: call it where the
    process is the command line, never in a library's caller (a test run's objects would never be
    collected)."""
    _imports_frozen[0] = True


@contextlib.contextmanager
def frozen_imports() -> Iterator[None]:
    """Runs the block (imports) with the cyclic garbage collector off, then, in a process that called
    freeze_imports_here, moves every object alive out of its reach (gc.freeze); turns the collector
    back on if it was on.

    Why: importing a large library (Beam, TensorFlow) creates a few hundred thousand objects that live
    as long as the process. The collector's passes over that growing heap free nothing, and passes
    made later walk them again; frozen, they are never walked (still freed when no longer referenced:
    Beam's import 0.35 s less). Wrap imports, not work: cyclic garbage alive at the freeze is kept.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if _imports_frozen[0]:
            gc.freeze()
        if enabled:
            gc.enable()
