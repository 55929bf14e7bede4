"""Blocked accumulation: how a long float sum is split into levels of partial sums, so that its rounding error grows
with the number of levels and not with the number of elements.

One accumulator that takes n additions carries a rounding error that grows with n (in the worst case n ulp of the
running sum), and a float32 accumulator that counts ones stops growing at 2**24. So no accumulator here takes more
than SUM_BLOCK additions: the reduce loops of a long sum are cut into blocks, each block sums into an accumulator of
its own that starts at zero, and the block's result is one addition into the level above; a level that would take
more than SUM_BLOCK block results is itself cut into blocks of blocks, and so on. A sum of n elements then has about
log(n)/log(SUM_BLOCK) levels and an error of a few ulp per level, as a pairwise sum does, at the cost of one loop and
one addition per block. Kernels whose accumulators take at most SUM_BLOCK additions are not changed.

The plan is made per reduce loop, innermost first: `plan_blocks` returns, for each loop, the sizes of the blocks it
is cut into (in iterations of that loop, outermost first). Each block is a loop over the blocks (or iterations)
inside it, and a new level of accumulators starts in its body.

>>> plan_blocks([1 << 20], per_step=32)       # 2**25 additions: blocks of 8 steps, of 2048 and of 524,288
[(524288, 2048, 8)]
>>> plan_blocks([1000, 3], per_step=1)        # 3 steps inside each outer step: a block is 85 outer steps
[(85,), ()]
>>> plan_blocks([100], per_step=2)            # 200 additions: one block, nothing to cut
[()]
"""
from __future__ import annotations

# the most additions one accumulator (one lane of it) takes before its partial sum is folded into the level above:
# an error of at most a few times SUM_BLOCK ulp per level in the worst case, about sqrt(SUM_BLOCK) typically, and a
# loop of SUM_BLOCK / (additions per step) steps between folds (their cost is nothing beside the block's loads)
SUM_BLOCK = 256
# the same for a register tile of several accumulators (a matmul's or a convolution's outputs): their sums are dot
# products, as long as the inner dim, which vendor libraries accumulate in one level; a level of blocks only where
# they are longer, since a second level of the tile's accumulators costs as many registers again
TILE_SUM_BLOCK = 4096


def plan_blocks(trips: list[int], per_step: int, block: int = SUM_BLOCK) -> list[tuple[int, ...]]:
    """The blocks each reduce loop is cut into (outer loops first), given each loop's trip count (an upper bound
    where it is symbolic) and the additions into one accumulator per step of the innermost loop. A loop's entry is
    a tuple of block sizes in iterations of that loop, outermost first, each a multiple of the next; a block of size
    1 is the loop's own body, where a level then starts; () leaves the loop as it is."""
    out: list[tuple[int, ...]] = [()] * len(trips)
    # additions into the current level's accumulator per iteration of the loop being looked at
    count = max(1, per_step)
    for j in range(len(trips) - 1, -1, -1):
        left = max(1, trips[j])
        if count * left <= block:
            count *= left
            continue
        sizes, unit = [], 1
        while count * left > block:
            # as many iterations (of `unit` each) per block as fit in one accumulator, at least one
            take = max(1, block // count)
            unit *= take
            sizes.append(unit)
            left = -(-left // take)
            count = 1
        out[j] = tuple(reversed(sizes))
        count = left
    return out


def needs_blocks(trips: list[int], per_step: int, block: int = SUM_BLOCK) -> bool:
    """Whether an accumulator of a reduction with these loops takes more than `block` additions."""
    total = max(1, per_step)
    for t in trips:
        total *= max(1, t)
        if total > block:
            return True
    return False
