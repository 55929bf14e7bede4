"""The LRU allocator cache: freed memory is reused by size bucket, never while a view still reads it, evicted least
recently used first, and given back when an allocation fails."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tinygrad import Tensor
from tinygrad.device import Device, LRUAllocator


class FakeAllocator(LRUAllocator):
    """Hands out ids; `capacity` bytes in all, beyond which _alloc raises MemoryError like a real device."""

    def __init__(self, capacity=1 << 20, max_cached=1 << 16):
        super().__init__(max_cached)
        self.capacity, self.live, self.allocs, self.frees, self.next = capacity, {}, 0, 0, 0

    def _alloc(self, size, options):
        if sum(self.live.values()) + size > self.capacity:
            raise MemoryError(f"fake device out of memory allocating {size}")
        self.next += 1
        self.allocs += 1
        self.live[self.next] = size
        return self.next

    def _free(self, opaque, options):
        self.frees += 1
        del self.live[opaque]


@given(st.integers(0, 1 << 30))
def test_bucket_fits_and_wastes_little(n):
    b = LRUAllocator.bucket(n)
    assert b >= n and b % 64 == 0
    if n > 4096:
        assert b - n <= n / 8


def test_freed_memory_is_reused_by_bucket():
    a = FakeAllocator()
    x = a.alloc(1000)
    a.free(x, 1000)
    assert a.alloc(1010) == x and a.allocs == 1  # same 1024-byte bucket
    y = a.alloc(5000)
    assert y != x and a.allocs == 2


def test_eviction_is_least_recently_used_first():
    a = FakeAllocator(max_cached=3 * 1024)
    bufs = {n: a.alloc(n) for n in (1024, 2048)}
    a.free(bufs[1024], 1024)
    a.free(bufs[2048], 2048)
    extra = a.alloc(1024 - 64)  # reuses nothing: 960 is its own bucket
    a.free(extra, 960)          # 1024 + 2048 + 960 > 3072: the oldest (1024) goes
    assert a.frees == 1 and bufs[1024] not in a.live
    assert a.cached_bytes == 2048 + 960


def test_memory_pressure_frees_the_cache_and_retries():
    a = FakeAllocator(capacity=4096, max_cached=1 << 20)
    x = a.alloc(3000)
    a.free(x, 3000)
    y = a.alloc(4000)  # does not fit beside the cached 3008 bytes: the cache is emptied first
    assert a.cached_bytes == 0 and x not in a.live and a.live[y] == 4032
    with pytest.raises(MemoryError):
        a.alloc(8192)


def test_pinned_host_memory_is_not_handed_out_again():
    alloc = Device["CLANG"].allocator
    t = Tensor(np.arange(16, dtype=np.float32)).to("CLANG").realize()
    view = t.lazydata.base.realized.as_buffer()  # pins the memory
    opaque = t.lazydata.base.realized._buf
    del t
    other = alloc.alloc(64)
    assert other is not opaque
    np.testing.assert_array_equal(np.frombuffer(view, np.float32), np.arange(16, dtype=np.float32))


def test_a_loop_does_not_call_the_system_allocator_each_step():
    alloc = Device["CLANG"].allocator
    x = Tensor.rand(256).realize()
    for _ in range(3):
        (x * 2 + 1).exp().sum().realize()
    calls = []
    real = alloc._alloc
    alloc._alloc = lambda size, options: calls.append(size) or real(size, options)
    try:
        for _ in range(20):
            (x * 2 + 1).exp().sum().realize()
    finally:
        del alloc._alloc
    assert calls == []


def test_sizes_beyond_64_bits_are_memory_errors_naming_the_size():
    for shape in [(2**62, 16), (2**40, 2**30), (2**22, 2**21, 2**20)]:
        with pytest.raises(MemoryError, match="beyond what a 64-bit address space holds"):
            Tensor.empty(*shape).realize()
    assert (Tensor([1.0]) + 1).tolist() == [2.0]
