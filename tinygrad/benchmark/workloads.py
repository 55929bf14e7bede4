"""The benchmark's workloads: their sizes per class of device, and the operation counts the rows divide by."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sizes:
    """The workloads' sizes for one class of device."""
    elements: int       # add, sum, softmax and layernorm, float32
    copy_bytes: int     # host<->device and device<->device copies
    mm_small: int       # fp32 matmul
    mm_large: int       # fp16/bf16 matmul (and fp32 at this size)
    matvec: int         # fp16 x @ W.T, W square
    conv: tuple         # (N, C, H, W) into C channels, 3x3, padding 1
    attn: tuple         # (batch, heads, seq, head dim), causal


GPU_SIZES = Sizes(64 << 20, 256 << 20, 1024, 4096, 8192, (8, 64, 56, 56), (8, 16, 1024, 64))
# a 4096^2 fp16 matmul would take minutes on two cores
HOST_SIZES = Sizes(4 << 20, 64 << 20, 1024, 512, 2048, (2, 32, 28, 28), (1, 4, 256, 64))


def conv_flops(s: Sizes) -> float:
    n, c, h, w = s.conv
    return 2 * n * c * h * w * c * 9


def attn_flops(s: Sizes) -> float:
    b, h, n, d = s.attn
    return 4 * b * h * n * n * d / 2  # causal: half the scores


def mm_small_flops(s: Sizes) -> float:
    return 2 * s.mm_small**3


def mm_large_flops(s: Sizes) -> float:
    return 2 * s.mm_large**3


def add_bytes(s: Sizes) -> float:
    return 3 * 4 * s.elements  # two reads and a write of float32


def sum_bytes(s: Sizes) -> float:
    return 4 * s.elements


def rowwise_bytes(s: Sizes) -> float:
    return 2 * 4 * s.elements  # softmax, layernorm: a read and a write


def matvec_bytes(s: Sizes) -> float:
    return 2 * s.matvec**2  # the fp16 weights, read once
