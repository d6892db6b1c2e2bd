"""Handing freed heap pages back to the system."""

from __future__ import annotations

import gc
import os
import platform
import subprocess
import sys
import textwrap

import pytest

from lmshards.command import cli
from lmshards.plumbing.memory import YOUNG_COLLECTION_OBJECTS, release_free_memory

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _rss_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * _PAGE


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only"
)
def test_free_pages_between_live_blocks_go_back_to_the_system():
    # 64 MB of 8 KB blocks (glibc's heap, not Python's small-object pools), one in 16 kept alive:
    # the freed ones are scattered below live blocks, so glibc cannot give them back by itself.
    blocks = [bytearray(8192) for _ in range(8192)]
    kept = blocks[::16]
    del blocks
    before = _rss_bytes()
    assert release_free_memory()
    after = _rss_bytes()
    assert before - after > 32 * 2**20, (before, after)
    assert len(kept) == 512


def _in_fresh_python(code: str) -> str:
    """stdout of `code` run by a new interpreter (the collector's state is per process)."""
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


def test_frozen_imports_freezes_what_the_block_creates_only_in_a_command_line_process():
    out = _in_fresh_python(
        """
        import gc
        from lmshards.plumbing import memory

        with memory.frozen_imports():
            assert not gc.isenabled()
            kept = [[i] for i in range(5000)]  # tracked objects, as an import's are
        print(gc.isenabled(), gc.get_freeze_count())
        memory.freeze_imports_here()
        with memory.frozen_imports():
            more = [[i] for i in range(5000)]
        print(gc.isenabled(), gc.get_freeze_count())
        gc.disable()
        with memory.frozen_imports():
            pass
        print(gc.isenabled())
        """
    )
    first, second, third = out.splitlines()
    assert first == "True 0"  # a library's caller (a test run): nothing frozen
    enabled, frozen = second.split()
    assert enabled == "True" and int(frozen) >= 10_000  # both blocks' lists, and all before them
    assert third == "False"  # off before: left off


def test_freeze_startup_heap_makes_young_collections_rarer():
    out = _in_fresh_python(
        """
        import gc
        from lmshards.plumbing import memory

        before = gc.get_threshold()
        memory.freeze_startup_heap()
        print(before[0], *gc.get_threshold(), gc.get_freeze_count() > 0)
        """
    )
    default_young, young, older, oldest, frozen = out.split()
    assert int(young) == YOUNG_COLLECTION_OBJECTS > int(default_young)
    assert frozen == "True"


def test_the_command_does_not_freeze_its_callers_objects():
    """main(argv) from code (a test, a notebook) leaves the caller's collector as it was: frozen
    objects are never cycle-collected, which only the command line's own process can afford."""
    frozen = gc.get_freeze_count()
    with pytest.raises(SystemExit):  # dispatched: the command's imports ran, then its parser exits
        cli.main(["report", "--no-such-flag"])
    assert gc.get_freeze_count() == frozen and gc.isenabled()
