"""The benchmark's memory figure counts each address space once.

A JVM starts every process (Hadoop's local file system runs ``chmod`` for each file it
creates) through ``posix_spawn``: until the child's ``exec`` it runs in the JVM's address
space, and its ``smaps_rollup`` is the JVM's. A sample taken then counted the JVM twice
(a cluster run's peak: 1,847 MB against 1,538 MB without the child).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import bench_backfill  # noqa: E402

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="kcmp(2) and /proc are Linux's"
)


def test_a_process_shares_its_own_memory_and_not_a_forked_childs() -> None:
    me = os.getpid()
    assert bench_backfill.shares_memory(me, me)
    child = os.fork()
    if child == 0:
        time.sleep(2)
        os._exit(0)
    try:
        assert not bench_backfill.shares_memory(child, me)  # copy-on-write, its own space
        # the child's pages are shared with this process: PSS halves them, the sum stays
        alone = bench_backfill.tree_pss(child)
        assert 0 < alone < bench_backfill.tree_pss(me)
    finally:
        os.kill(child, 9)
        os.waitpid(child, 0)


def test_a_process_given_twice_is_counted_once() -> None:
    me = os.getpid()
    once, twice = bench_backfill.tree_pss(me), bench_backfill.tree_pss(me, me)
    assert abs(twice - once) < once / 4, (once, twice)
