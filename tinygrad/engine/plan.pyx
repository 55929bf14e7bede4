# cython: language_level=3
"""Schedule plans: the schedule of a graph, cached by the graph's structure and replayed on new buffers.

Eager code builds the same small graphs over and over (`x * 2 + 1` every step, an optimizer's update every step).
Scheduling one again would give the same kernels reading the same kinds of buffers, so the first time a structure is
seen its schedule is turned into a Plan: each kernel's runner, with its buffers named by their position in the graph
(the n-th unrealized node, the n-th realized input). The next graph of the same structure walks once to collect its
nodes and inputs and launches the Plan's kernels on them: no scheduling, no AST hashing, no method-cache lookup.

The structure key holds everything the scheduler decides from: each node's op, arg, dtype, device and
forced-realize flag; each edge's ShapeTracker; constants with their values (a -0.0 is not a 0.0); which inputs share
memory; which nodes are outputs. Graphs with bound symbolic variables are not planned (the JIT serves them).
"""
from libc.math cimport copysign

import time

import tinygrad.profile as _profile
from tinygrad.diskcache import code_version, diskcache_get, diskcache_put
from tinygrad.engine import records
from tinygrad.engine.realize import CacheCollector, CompiledRunner, lower_ast, precompile_asts, run_schedule
from tinygrad.engine.schedule import create_schedule_with_vars
from tinygrad.helpers import CACHELEVEL, DEBUG, FLASH_ATTENTION, VIZ, GlobalCounters, raise_pending_interrupt
from tinygrad.lazy cimport LazyBuffer
from tinygrad.locks cimport ReentrantLock
from tinygrad.locks import ENGINE_LOCK
from tinygrad.ops import LazyOp, LoadOps
from tinygrad.shape.shapetracker cimport ShapeTracker
from tinygrad.shape.view cimport View
from tinygrad.shape.symbolic import Node

_CONST = LoadOps.CONST
_ASSIGN = LoadOps.ASSIGN
_IOTA = LoadOps.IOTA
_CUSTOM = LoadOps.CUSTOM

# every step of realizing holds it (see locks.pyx): taken here in C, as this is the eager path
cdef ReentrantLock _engine_lock = ENGINE_LOCK
# structure key -> Plan; bounded, so a program that makes endless distinct graphs does not grow it forever
cdef dict _plans = {}
cdef int MAX_PLANS = 2048
# plans made, and graphs served by a plan (plan_stats())
cdef long plan_misses = 0
cdef long plan_hits = 0
cdef long plan_disk_hits = 0


cdef class PlanItem:
    def __init__(self, runner, ast, tuple buf_refs, int n_outputs, tuple lb_refs):
        self.runner, self.ast, self.buf_refs, self.n_outputs, self.lb_refs = runner, ast, buf_refs, n_outputs, lb_refs
        # a kernel with no variables whose device offers a direct launch skips the runner's Python layers
        self.launch = getattr(runner, "fast_launch", None)


cdef class Plan:
    def __init__(self, tuple items, int n_kernels, object n_ops=0, object n_mem=0, tuple drops=None,
                 tuple unused=()):
        self.items = items
        self.n_kernels = n_kernels
        self.n_ops = n_ops
        self.n_mem = n_mem
        self.drops = drops if drops is not None else ((),) * len(items)
        self.unused = unused


cdef tuple _last_uses(list items, int n_nodes):
    """(per item, the nodes it names last; the nodes no item names) for `items` (see _items_of).

    NOTE: a run drops its own reference to a node once no later item names it. The node's LazyBuffer (and with it
    its buffer) then lives only as long as something else holds it: the user, or a node of the graph not yet
    realized. Without this the run's list of nodes kept every intermediate buffer of the graph alive to its end, so
    a training step held all of its activations and gradients at once (a GPT-2 124M step: 35.8 GB, where the
    schedule needs 20.4 GB at its fullest point)."""
    cdef list last = [-1] * n_nodes
    cdef int j, r
    for j, (ast, buf_refs, n_outputs, lb_refs) in enumerate(items):
        for r in buf_refs + lb_refs:
            if r >= 0:
                last[r] = j
    drops = [[] for _ in items]
    unused = []
    for r in range(n_nodes):
        if last[r] < 0:
            unused.append(r)
        else:
            drops[last[r]].append(r)
    return tuple(tuple(d) for d in drops), tuple(unused)


# op enums and dtypes hash in Python code; the key uses a small int per object instead. The table keeps each object
# alive, so its id is never reused by another object (two equal but distinct dtypes just miss the cache).
cdef dict _interned = {}
cdef list _interned_objs = []


cdef inline object _intern(object obj):
    r = _interned.get(<Py_ssize_t><void*>obj)
    if r is None:
        r = _interned[<Py_ssize_t><void*>obj] = len(_interned_objs)
        _interned_objs.append(obj)
    return r


cdef inline Py_ssize_t _id(object o):
    # id() without the builtin call
    return <Py_ssize_t><void*>o


cdef inline bint _needs_compute(LazyBuffer b):
    # unrealized and not inlined into kernels (constants and iotas are)
    if b.op is _CONST or b.op is _IOTA:
        return False
    return b._buffer is None or b.pending or b._buffer._buf is None


cdef inline bint _symbolic(ShapeTracker st):
    # any view with a symbolic field (cheaper than asking the tracker for its variables)
    for v in st.views:
        if not (<View>v)._all_int:
            return True
    return False


cdef object _const_key(LazyBuffer b):
    arg = b.arg
    if isinstance(arg, Node):
        return None
    if type(arg) is float and arg == 0.0:
        # 0.0 == -0.0, but they are different constants
        return (_intern(b.op), _intern(b.dtype), b.shape, arg, copysign(1.0, arg))
    return (_intern(b.op), _intern(b.dtype), b.shape, arg)


cdef object _walk(list outs, list nodes, list leaves):
    """The structure key of the graph computing `outs`, filling `nodes` (unrealized bases, sources first) and
    `leaves` (realized bases it reads); None when the graph can't be planned."""
    cdef dict index = {}       # id(node) -> position in nodes
    cdef dict leaf_index = {}  # id(leaf) -> position in leaves
    cdef list key = []
    cdef list stack = []
    cdef LazyBuffer b, s, sb
    cdef ShapeTracker st
    for o in outs:
        b = (<LazyBuffer>o)._base if (<LazyBuffer>o)._base is not None else o
        if _needs_compute(b) and _id(b) not in index:
            stack.append((b, False))
            while stack:
                b, done = stack.pop()
                if done:
                    if _id(b) in index:
                        continue
                    srcs_key = []
                    for s in b.srcs:
                        sb = s._base if s._base is not None else s
                        st = s.st
                        if _symbolic(st):
                            return None
                        edge = None if s is sb else st
                        if _needs_compute(sb):
                            srcs_key.append((index[_id(sb)], edge))
                        elif sb.op is _CONST or sb.op is _IOTA:
                            if sb._buffer is not None and sb._buffer._buf is not None or _symbolic(sb.st):
                                return None
                            ck = _const_key(sb)
                            if ck is None:
                                return None
                            srcs_key.append((ck, edge))
                        else:
                            li = leaf_index.get(_id(sb))
                            if li is None:
                                li = leaf_index[_id(sb)] = len(leaves)
                                leaves.append(sb)
                            srcs_key.append((-1 - <int>li, edge))
                    if type(b.size) is not int:
                        return None
                    if b.op is _ASSIGN and b.arg is not None and _symbolic(b.arg):
                        # written through a view at a bound position: its key would not hold the position
                        return None
                    index[_id(b)] = len(nodes)
                    nodes.append(b)
                    key.append((_intern(b.op), b.arg, _intern(b.dtype), b.device, b.forced_realize,
                                tuple(srcs_key)))
                    continue
                if _id(b) in index:
                    continue
                if b.op is _CUSTOM:
                    # a multi-device collective: its arg is one object per call (and holds its outputs), so a plan
                    # keyed by it would never be hit again and would keep the buffers alive
                    return None
                stack.append((b, True))
                for s in b.srcs:
                    sb = s._base if s._base is not None else s
                    if _needs_compute(sb) and _id(sb) not in index:
                        stack.append((sb, False))
    # inputs: their kind, shape, and which of them share memory (an in-place update reads what it writes)
    cdef dict first_of = {}
    leaf_key = []
    for i, sb in enumerate(leaves):
        alias = first_of.setdefault(_id(sb._buffer), i)
        leaf_key.append((_intern(sb.dtype), sb.device, sb.shape, alias))
    out_key = []
    for o in outs:
        b = (<LazyBuffer>o)._base if (<LazyBuffer>o)._base is not None else o
        out_key.append(index.get(_id(b), -1))
    return (tuple(key), tuple(leaf_key), tuple(out_key))


cdef str _stable_key(tuple key):
    """The structure key as text that is the same in every process (interned numbers back to the objects' reprs),
    to key the disk cache."""
    (nodes_key, leaf_key, out_key), flash = key
    parts = [code_version(), f"FLASH_ATTENTION={flash}"]
    for op_i, arg, dt_i, device, forced, srcs in nodes_key:
        src_parts = []
        for ref, edge in srcs:
            if isinstance(ref, tuple):
                ref = (repr(_interned_objs[ref[0]]), repr(_interned_objs[ref[1]])) + ref[2:]
            src_parts.append(f"{ref!r}@{edge!r}")
        parts.append(f"{_interned_objs[op_i]!r}|{arg!r}|{_interned_objs[dt_i]!r}|{device}|{forced}|"
                     f"{','.join(src_parts)}")
    for dt_i, device, shape, alias in leaf_key:
        parts.append(f"leaf|{_interned_objs[dt_i]!r}|{device}|{shape!r}|{alias}")
    parts.append(f"outs|{out_key!r}")
    return "\n".join(parts)


cdef list _items_of(list schedule, list nodes, list leaves):
    """The schedule as (ast, buffer refs, output count, realized-node refs) per item; None when one of its buffers
    is neither a node nor a leaf of this graph (then it is not cached)."""
    cdef dict ref = {}
    for i, b in enumerate(leaves):
        ref.setdefault(id(b.buffer), -1 - i)
    for i, b in enumerate(nodes):
        ref[id(b.buffer)] = i
    cdef dict node_ref = {id(b): i for i, b in enumerate(nodes)}
    items = []
    for si in schedule:
        buf_refs = []
        for buf in si.bufs:
            r = ref.get(id(buf))
            if r is None:
                return None
            buf_refs.append(r)
        lb_refs = []
        for lb in si.lbs:
            r = node_ref.get(id(lb))
            if r is None:
                return None
            lb_refs.append(r)
        items.append((si.ast, tuple(buf_refs), si.n_outputs, tuple(lb_refs)))
    return items


cdef Plan _make_plan(list items, list nodes, list leaves):
    """A Plan running `items` (see _items_of): each kernel's runner found (or compiled) now."""
    devices = []
    for ast, buf_refs, n_outputs, lb_refs in items:
        r = buf_refs[0]
        devices.append((<LazyBuffer>nodes[r]).buffer.device if r >= 0 else (<LazyBuffer>leaves[-1 - r]).buffer.device)
    precompile_asts([(dev, it[0]) for dev, it in zip(devices, items)])
    plan_items = tuple(PlanItem(lower_ast(dev, ast), ast, buf_refs, n_outputs, lb_refs)
                       for dev, (ast, buf_refs, n_outputs, lb_refs) in zip(devices, items))
    # what a run adds to GlobalCounters, counted once here: the same kernels on buffers of the same sizes every time
    # (a planned graph has no symbolic shapes)
    n_kernels, n_ops, n_mem = 0, 0, 0
    for it in plan_items:
        if isinstance(it.runner, CompiledRunner):
            n_kernels += 1
            n_ops += it.runner.op_estimate
            for r in it.buf_refs:
                n_mem += (<LazyBuffer>nodes[r]).buffer.nbytes if r >= 0 else (<LazyBuffer>leaves[-1 - r]).buffer.nbytes
    drops, unused = _last_uses(items, len(nodes))
    return Plan(plan_items, n_kernels, n_ops, n_mem, drops, unused)


cdef list _load_items(str skey, int n_nodes, int n_leaves):
    """The schedule items a previous process stored for this structure, or None."""
    hit = diskcache_get("schedule", skey)
    if hit is None:
        return None
    try:
        items = records.loads(hit)
        # a stored schedule names buffers by position: they must exist in this graph
        for ast, buf_refs, n_outputs, lb_refs in items:
            if type(ast) is not tuple or not all(type(a) is LazyOp for a in ast) or type(n_outputs) is not int:
                return None
            for r in buf_refs + lb_refs:
                if type(r) is not int or not -n_leaves <= r < n_nodes:
                    return None
        return items
    except (records.RecordError, TypeError, ValueError):  # not a schedule of this build: schedule anew
        return None


def realize_lazybuffers(list outs):
    """Compute the LazyBuffers `outs`: through a cached Plan when this graph's structure was seen before, else by
    scheduling it (and caching the Plan of what was scheduled). Safe from several threads: the whole of it holds
    ENGINE_LOCK. A node counts as computed once its buffer has memory, which it gets just before its kernel runs, so
    another thread walking the same graph meanwhile would read that buffer unwritten as a realized input (or
    allocate it a second time, or run its kernels again into a buffer being read, or find its sources dropped)."""
    cdef LazyBuffer lb, b
    for lb in outs:
        # a constant asked to be realized stays a constant (no buffer: kernels inline it), kept from folding
        b = lb._base if lb._base is not None else lb
        if b.op is LoadOps.CONST and b._buffer is None:
            b.kept = True
    _engine_lock.enter()
    try:
        _realize(outs)
    finally:
        _engine_lock.leave()


cdef tuple _schedule(list outs):
    """create_schedule_with_vars(outs), recorded as a "schedule" span when profiling."""
    prof = _profile.current
    if prof is None:
        return create_schedule_with_vars(outs)
    st = time.perf_counter()
    ret = create_schedule_with_vars(outs)
    prof.host("schedule", st, time.perf_counter(), {"items": len(ret[0])})
    return ret


cdef _realize(list outs):
    global plan_hits, plan_misses, plan_disk_hits
    cdef list nodes = []
    cdef list leaves = []
    if DEBUG.value >= 1 or VIZ.value or _profile.current is not None or \
            CacheCollector.active and CacheCollector.cache is not None:
        # the slow path prints, profiles and records what it runs (for the JIT's capture and the visualizer)
        run_schedule(*_schedule(outs), consume=True)
        return
    key = _walk(outs, nodes, leaves)
    if key is None:
        run_schedule(*_schedule(outs), consume=True)
        return
    if not nodes:
        return
    # the schedule of a structure depends on the knobs the scheduler reads: they are part of its key
    key = (key, FLASH_ATTENTION.value)
    cdef Plan plan = _plans.get(key)
    cdef list items
    if plan is None:
        skey = _stable_key(key) if CACHELEVEL.value >= 2 else None
        items = _load_items(skey, len(nodes), len(leaves)) if skey is not None else None
        if items is None:
            schedule, var_vals = _schedule(outs)
            items = _items_of(schedule, nodes, leaves) if not var_vals else None
            if items is None:
                run_schedule(schedule, var_vals, consume=True)
                return
            # the schedule's items hold every buffer of the graph: not kept while the plan runs
            schedule = None
            if skey is not None:
                try:
                    diskcache_put("schedule", skey, records.dumps(items))
                except records.RecordError:  # an argument the record format doesn't name: just not kept on disk
                    pass
        else:
            plan_disk_hits += 1
        plan = _make_plan(items, nodes, leaves)
        if len(_plans) >= MAX_PLANS:
            _plans.clear()
        _plans[key] = plan
        plan_misses += 1
    else:
        plan_hits += 1
    _run(plan, nodes, leaves)


cdef void _run(Plan plan, list nodes, list leaves) except *:
    cdef PlanItem item
    cdef LazyBuffer lb
    cdef list bufs
    cdef int i, r, j
    empty = {}
    for r in plan.unused:
        nodes[r] = None
    for j, item in enumerate(plan.items):
        bufs = []
        for r in item.buf_refs:
            bufs.append((<LazyBuffer>nodes[r]).buffer if r >= 0 else (<LazyBuffer>leaves[-1 - r]).buffer)
        for i in range(item.n_outputs):
            buf = bufs[i]
            if buf._buf is None:
                buf._allocate()  # ENGINE_LOCK is held (realize_lazybuffers)
        if item.launch is not None:
            item.launch(*[b._buf for b in bufs])
        else:
            et = item.runner(bufs, empty)
            if et is not None:
                GlobalCounters.time_sum_s += et
        # a realized base no longer needs the graph that produced it
        for r in item.lb_refs:
            lb = nodes[r]
            lb.srcs = ()
            lb.pending = False
        lb = None
        for r in plan.drops[j]:
            nodes[r] = None
    GlobalCounters.kernel_count += plan.n_kernels
    GlobalCounters.global_ops += plan.n_ops
    GlobalCounters.global_mem += plan.n_mem
    raise_pending_interrupt()


def plan_stats():
    """(graphs served by a cached Plan, Plans made, of which made from a schedule on disk) in this process."""
    return plan_hits, plan_misses, plan_disk_hits


def clear_plans():
    """Forget every cached Plan (tests; a device whose kernels were recompiled)."""
    _plans.clear()



