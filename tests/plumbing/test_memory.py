"""Handing freed heap pages back to the system."""

from __future__ import annotations

import os
import platform

import pytest

from lmshards.plumbing.memory import release_free_memory

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
