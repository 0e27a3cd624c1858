"""mobius.output.saving: what one save shares with its writer threads."""

from __future__ import annotations

import gc
import mmap
import threading

from mobius.output import direct_io
from mobius.output.saving import frozen_heap, release_scratch, scratch


def test_the_heap_stays_frozen_until_the_last_save_ends():
    assert gc.get_freeze_count() == 0
    kept = [object() for _ in range(10)]
    with frozen_heap():
        assert gc.get_freeze_count() >= len(kept)
        with frozen_heap():  # a save beside it
            pass
        assert gc.get_freeze_count() >= len(kept)
        gc.collect()  # the writers' garbage is still collected
    assert gc.get_freeze_count() == 0


def test_scratch_buffers_are_page_aligned_and_reused_per_thread():
    try:
        first = scratch(10_000, "cast")
        assert direct_io._address(first) % mmap.PAGESIZE == 0
        again = scratch(5_000, "cast")  # smaller: the same memory
        assert direct_io._address(again) == direct_io._address(first)
        assert len(again) == 5_000
        other: list[int] = []
        thread = threading.Thread(
            target=lambda: other.append(direct_io._address(scratch(10, "cast")))
        )
        thread.start()
        thread.join()
        assert other[0] != direct_io._address(first)  # each thread its own
        assert scratch(0, "empty").nbytes == 0
    finally:
        release_scratch()
