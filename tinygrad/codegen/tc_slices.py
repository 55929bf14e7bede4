"""Operand slices of a block-tile kernel (codegen/lower_tc.py) staged in shared memory.

Each step of a block tile's K loop stages a rows x BK slice of A (rows along M) and of B (rows along N): every thread
copies its share as 16-byte chunks (8 halves or 4 floats), along K where the slice is stored K-major, else along its
rows, read as one vector where the operand is contiguous along the chunk, else element by element. Tensor-core slices
are swizzled by chunks (tensor_cores.swizzle) so that the eight rows an `ldmatrix` (or a 16-byte store) touches at
one chunk fall in distinct banks; wgmma's N-major slices are 64-column atoms in the hardware's 128-byte swizzle.
`SliceStager` makes those copies and stores and the slices' element offsets, which the fragment reads share.
"""
from __future__ import annotations

from tinygrad.codegen.emitter import Emitter, is_false, is_true, lane_base
from tinygrad.codegen.tensor_cores import TCPlan, TileKind, along_k, swizzle
from tinygrad.codegen.uops import UOp, UOps
from tinygrad.dtype import dtypes
from tinygrad.shape.symbolic import Node, NumNode, Variable


class SliceStager:
    """Copies and offsets of the staged slices of `plan`'s operands: `buffers` maps a buffer index to its
    DEFINE_GLOBAL, `tid` is the thread's index in the block, `batch` the batch dims' Variables (the tile's position
    along them, which every copy reads at)."""

    def __init__(self, em: Emitter, plan: TCPlan, full_shape: tuple, buffers: dict[int, UOp], tid: UOp,
                 batch: dict[int, Variable]):
        self.em, self.plan, self.full, self.buffers, self.tid, self.batch = em, plan, full_shape, buffers, tid, batch
        self.k_size = plan.size(full_shape, plan.k_axis)
        self.ktiles = -(-self.k_size // plan.config.bk)

    # ---- where a slice's elements are ----
    def offset(self, r: UOp, k: UOp, rows: int, k_major: bool) -> UOp:
        """The element offset of (row `r`, `k`) in a staged slice of `rows` rows (see tensor_cores.slice_elems and
        swizzle: tensor-core slices are swizzled by 16-byte chunks, so there the position along a slice's row must be
        a chunk's first element)."""
        em, cfg = self.em, self.plan.config
        row_elems = cfg.bk if k_major else rows
        row, col = (r, k) if k_major else (k, r)
        if not self.plan.swizzled:
            return em.add(em.mul(row, em.const(row_elems)), col)
        if self.plan.kind is TileKind.WGMMA and not k_major:
            # wgmma's N-major layout: atoms of 64 columns (128 bytes) by BK rows of K, one after another; in an
            # atom, chunk c of row k at chunk c ^ (k % 8) (the 128-byte swizzle)
            atom = em.mul(em.div(col, em.const(64)), em.const(cfg.bk * 64))
            chunk = em.xor(em.div(em.mod(col, em.const(64)), em.const(8)), em.mod(row, em.const(8)))
            return em.add(atom, em.add(em.mul(row, em.const(64)), em.mul(chunk, em.const(8))))
        lanes = self.plan.lanes
        per_line, chunks = swizzle(row_elems, lanes)
        line = em.div(row, em.const(per_line)) if per_line > 1 else row
        line_swizzle = em.mod(line, em.const(chunks))
        chunk = em.xor(em.div(col, em.const(lanes)), line_swizzle)
        return em.add(em.mul(row, em.const(row_elems)), em.mul(chunk, em.const(lanes)))

    def element_offset(self, r: UOp, k: UOp, rows: int, layout_k: bool) -> UOp:
        """The offset of one element (row `r`, `k`) in a staged slice: a swizzled slice places whole chunks
        (`offset`), so the element's own place in its chunk goes on top."""
        if not self.plan.swizzled:
            return self.offset(r, k, rows, layout_k)
        em = self.em
        col = k if layout_k else r
        within = em.mod(col, em.const(self.plan.lanes))
        col = em.sub(col, within)
        return em.add(self.offset(r, col, rows, True) if layout_k else self.offset(col, k, rows, False), within)

    # ---- which slice a pipeline step reads ----
    def step_at(self, step, tag: str) -> tuple:
        """Where pipeline step `step` (an int, or a uop) reads: (K's first index, {other reduced dim: its index}).
        Steps run K's slices innermost, then the other reduced dims (TCPlan.outer) in order, the last fastest."""
        em, bk, ktiles = self.em, self.plan.config.bk, self.ktiles
        full, outer = self.full, self.plan.outer
        if isinstance(step, int):
            at, rest = {}, step // ktiles
            for d in reversed(outer):
                at[d], rest = NumNode(rest % full[d]), rest // full[d]
            return em.const((step % ktiles) * bk), at
        if not outer:
            return em.mul(step, em.const(bk)), {}
        k_tile = em.mod(step, em.const(ktiles)) if ktiles > 1 else em.const(0)
        rest = em.div(step, em.const(ktiles)) if ktiles > 1 else step
        at = {}
        for i, d in enumerate(reversed(outer)):
            v = Variable(f"tc_{tag}_r{d}", 0, full[d] - 1)
            last = i == len(outer) - 1
            # the outermost reduced dim takes what is left: the step never runs past the last one's end
            em.bind(v, rest if last else em.mod(rest, em.const(full[d])))
            if not last:
                rest = em.div(rest, em.const(full[d]))
            at[d] = v
        return em.mul(k_tile, em.const(bk)), at

    # ---- a thread's share of a slice: read, then stored ----
    def copy(self, op, rows_axis: int, rows: int, row0: UOp, at: tuple, gate: UOp | None, asynchronous: bool) -> list:
        """This thread's share of a rows x BK slice of operand `op` (rows from `row0` along `rows_axis`, K and the
        other reduced dims where `at` says, from step_at):
        [(row in the slice, k in the slice, is the chunk along K, rows, 8 consecutive elements' 16-bit patterns)],
        chunks along K where the slice is staged K-major, else along the rows; read as one 16-byte vector where the
        operand is contiguous along the chunk, else element by element. `gate`: read only where true (else zeros).
        `asynchronous`: the chunks are copied asynchronously (tensor_cores.copies_async holds): the last item is then
        (the buffer, the chunk's index, its condition or None) for COPY_ASYNC instead of a value."""
        em, plan = self.em, self.plan
        cfg, elem, lanes = plan.config, plan.elem, plan.lanes
        st, k_ax = op.arg.st, plan.k_axis
        nthreads = cfg.threads
        k_major = along_k(st, rows_axis, k_ax)
        inner = cfg.bk // lanes if k_major else rows // lanes
        outer_step = nthreads // inner
        n_chunks = rows * cfg.bk // lanes // nthreads
        t_out = em.div(self.tid, em.const(inner))
        t_in = em.mul(em.mod(self.tid, em.const(inner)), em.const(lanes))
        lane = Variable("tc_lane", 0, lanes - 1)
        k0, outer_at = at
        merged = bool(plan.merged(rows_axis))
        out = []
        # bounds of the tiles' whole range: past the end of a dim no tile divides, the limits below say no
        size = self.rows_size(rows_axis)
        padded_rows = -(-size // rows) * rows
        padded_k = self.ktiles * cfg.bk
        for i in range(n_chunks):
            outer = em.add(t_out, em.const(i * outer_step))
            r_in, k_in = (outer, t_in) if k_major else (t_in, outer)
            row_var = Variable(f"tc_r{rows_axis}_{i}", 0, padded_rows - (lanes if not k_major else 1))
            k_var = Variable(f"tc_k{rows_axis}_{i}", 0, padded_k - (lanes if k_major else 1))
            em.bind(row_var, em.add(row0, r_in))
            em.bind(k_var, em.add(k0, k_in))
            row, k = (row_var, k_var + lane) if k_major else (row_var + lane, k_var)
            nodes = self._nodes(rows_axis, row, k, outer_at)
            idx, valid = st.expr_idxs(nodes)
            limits = [valid]
            # NOTE: a chunk starts at a multiple of its lanes, so where the dim's size is one too, the chunk is wholly
            # inside or wholly past the end: its start says which (a condition the same in every lane)
            if padded_rows != size:
                whole = not k_major and size % lanes == 0
                limits.append(row_var < size if whole else self._rows_limit(rows_axis, nodes))
            if padded_k != self.k_size:
                whole = k_major and self.k_size % lanes == 0
                limits.append(k_var < self.k_size if whole else self._rows_limit(k_ax, nodes))
            if len(limits) > 1:
                valid = Node.ands(limits)
            # (merged dims: a chunk may cross from one dim's end to the next, so its elements are read one by one)
            base = lane_base(idx, lane) if lane not in valid.vars() and not (merged if not k_major else plan.k_dims) \
                else None
            if i == 0 and (base is None or merged) and not asynchronous and not k_major and nthreads % rows == 0:
                # read element by element along the rows: a thread an element, neighbours reading neighbours
                return self._copy_spread(op, rows_axis, rows, row0, at, gate)
            if asynchronous:
                if base is None:
                    raise RuntimeError("internal error: an asynchronous copy of elements that are not consecutive")
                out.append((r_in, k_in, k_major, rows, (self.buffers[op.arg.idx], em.lower_node(base),
                                                        self._cond(valid, gate))))
                continue
            # tensor-core operands move as 16-bit patterns ("bits": a half is not converted to a float register)
            zero = em.const(dtypes.as_const(0, elem), elem)
            if base is not None:
                vin = (self.buffers[op.arg.idx], em.lower_node(base))
                cond = self._cond(valid, gate)
                if cond is not None:
                    vin = vin + (cond, em.uop(UOps.VECTORIZE, elem.vec(lanes), (zero,) * lanes, None))
                val = em.uop(UOps.LOAD, elem.vec(lanes), vin, None, False)
            else:
                elems = []
                for j in range(lanes):
                    li, lv = idx.substitute({lane: NumNode(j)}), valid.substitute({lane: NumNode(j)})
                    if is_false(lv):
                        elems.append(zero)
                        continue
                    vin = (self.buffers[op.arg.idx], em.lower_node(li))
                    cond = self._cond(lv, gate)
                    if cond is not None:
                        vin = vin + (cond, zero)
                    elems.append(em.uop(UOps.LOAD, elem, vin, None if elem.itemsize == 4 else "bits", False))
                val = em.uop(UOps.VECTORIZE, elem.vec(lanes), tuple(elems), None)
            out.append((r_in, k_in, k_major, rows, val))
        return out

    def _copy_spread(self, op, rows_axis: int, rows: int, row0: UOp, at: tuple, gate: UOp | None) -> list:
        """`copy` for an operand read along its rows one element at a time (a convolution's padded window): element
        e = tid + m * threads of the rows x BK slice is row e % rows, k e // rows, so a warp's 32 threads read 32
        neighbours in one transaction, where 8-element chunks a thread would spread each read of a warp over 8 times
        the bytes. Items (row, k, None, rows, the element), stored one by one (`stage`)."""
        em, plan = self.em, self.plan
        cfg, elem = plan.config, plan.elem
        st = op.arg.st
        nthreads = cfg.threads
        r_in = em.mod(self.tid, em.const(rows)) if nthreads > rows else self.tid
        k_first = em.div(self.tid, em.const(rows)) if nthreads > rows else em.const(0)
        k0, outer_at = at
        size = self.rows_size(rows_axis)
        padded_rows = -(-size // rows) * rows
        padded_k = self.ktiles * cfg.bk
        row_var = Variable(f"tc_sr{rows_axis}", 0, padded_rows - 1)
        em.bind(row_var, em.add(row0, r_in))
        zero = em.const(dtypes.as_const(0, elem), elem)
        out = []
        for m in range(rows * cfg.bk // nthreads):
            k_in = em.add(k_first, em.const(m * (nthreads // rows)))
            k_var = Variable(f"tc_sk{rows_axis}_{m}", 0, padded_k - 1)
            em.bind(k_var, em.add(k0, k_in))
            idx, valid = st.expr_idxs(self._nodes(rows_axis, row_var, k_var, outer_at))
            limits = [valid]
            if padded_rows != size:
                limits.append(row_var < size)
            if padded_k != self.k_size:
                limits.append(k_var < self.k_size)
            if len(limits) > 1:
                valid = Node.ands(limits)
            if is_false(valid):
                val = zero
            else:
                vin = (self.buffers[op.arg.idx], em.lower_node(idx))
                cond = self._cond(valid, gate)
                if cond is not None:
                    vin = vin + (cond, zero)
                val = em.uop(UOps.LOAD, elem, vin, None if elem.itemsize == 4 else "bits", False)
            out.append((r_in, k_in, None, rows, val))
        return out

    def rows_size(self, rows_axis: int) -> int:
        """The length of an operand's rows (or of K): M's or N's (merged dims: their product)."""
        return self.plan.size(self.full, rows_axis)

    def _rows_limit(self, rows_axis: int, nodes: list):
        """Is the element at `nodes` inside its rows' (or K's) length? Merged dims: the outermost's quotient says it."""
        d = (self.plan.merged(rows_axis) or (rows_axis,))[0]
        return nodes[d] < self.full[d]

    def _nodes(self, rows_axis: int, r, k, outer_at: dict) -> list:
        """Index nodes of the full shape for a staged slice's element: `r` along the operand's rows (merged dims
        each at their part of it), `k` along K, the tile's batch position and the other reduced dims where
        `outer_at` says (step_at), 0 elsewhere."""
        rows = {**self.plan.split(self.full, rows_axis, r), **self.plan.split(self.full, self.plan.k_axis, k)}
        nodes = []
        for d in range(len(self.full)):
            if d in rows:
                nodes.append(rows[d])
            elif d in self.batch:
                nodes.append(self.batch[d])
            elif d in outer_at:
                nodes.append(outer_at[d])
            else:
                nodes.append(NumNode(0))
        return nodes

    def _cond(self, valid, gate: UOp | None) -> UOp | None:
        if is_true(valid):
            return gate
        v = self.em.lower_node(valid)
        return v if gate is None else self.em.both(v, gate)

    def stage(self, chunks: list, smem: UOp, base: UOp, layout_k: bool) -> None:
        """Writes chunks read by `copy` into a staged slice at `base`, K-major or not (`layout_k`): a chunk along
        the slice's rows is one 16-byte store, a chunk across them (an SMEM operand read along K) one store per
        element."""
        em, lanes = self.em, self.plan.lanes
        for r_in, k_in, k_major, rows, val in chunks:
            if k_major is None:
                em.uop(UOps.STORE, None, (smem, em.add(base, self.element_offset(r_in, k_in, rows, layout_k)), val),
                       None, False)
                continue
            if k_major != layout_k:
                for j in range(lanes):
                    rj, kj = (r_in, em.add(k_in, em.const(j))) if k_major else (em.add(r_in, em.const(j)), k_in)
                    lane = val.vin[j] if val.uop is UOps.VECTORIZE else em.uop(UOps.GEP, self.plan.elem, (val,), j)
                    em.uop(UOps.STORE, None, (smem, em.add(base, self.element_offset(rj, kj, rows, layout_k)), lane),
                           None, False)
                continue
            at = em.add(base, self.offset(r_in, k_in, rows, k_major))
            if isinstance(val, tuple):
                buf, idx, cond = val
                em.uop(UOps.COPY_ASYNC, None, (smem, at, buf, idx) + ((cond,) if cond is not None else ()), 16, False)
            else:
                em.uop(UOps.STORE, None, (smem, at, val), "aligned", False)
