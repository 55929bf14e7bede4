"""The visualizer's data: the run log (engine/runlog.py) as a graph of items and buffers, plus each kernel's texts.

`snapshot()` is what the page's JSON endpoint serves:

- `items`: every kernel, copy or allocation run, in order: its kind, name, device, time, the buffer nodes it read
  (`inputs`) and wrote (`outputs`), and the `program` (an index into `programs`) for a kernel;
- `buffers`: buffer nodes. A buffer written again (an assign, a reused output) gets a new node per write (its
  `version`), so the graph stays acyclic and reads in the order things ran;
- `edges`: [from, to] node names, `b<i>` for buffer nodes and `k<i>` for items;
- `programs`: one per compiled kernel: its AST (print_ast), applied Opts, uops (the linearizer's listing) and
  rendered source, with how often it ran and its total time.
"""
from __future__ import annotations

from typing import Any

from tinygrad.codegen.kernel import opts_text
from tinygrad.device import Device
from tinygrad.engine.runlog import RUN_LOG, RunLog
from tinygrad.helpers import Context
from tinygrad.ops import print_ast


def relinearize(dname: str, ast: tuple, opts: tuple):
    """The kernel `ast` linearized for device `dname` with exactly the Opts `opts` it was compiled with: the
    renderer keeps only the source, so the page's uops come from linearizing again (test_viz checks that these
    uops render to the kernel's source)."""
    from tinygrad.codegen.linearizer import Linearizer
    lin = Linearizer(ast, Device[dname].linearizer_opts)
    for o in opts:
        lin.apply_opt(o)
    # NOOPT: the Opts applied are all of them (the heuristic already chose these when the kernel was compiled)
    with Context(NOOPT=1):
        lin.linearize()
    return lin


def uops_text(dname: str, ast: tuple, opts: tuple) -> str:
    """The uops listing (DEBUG=6's) of a compiled kernel (once per program, when the page's data is built)."""
    from tinygrad.codegen.uops import print_uops
    try:
        return print_uops(relinearize(dname, ast, opts).uops)
    except Exception as e:  # a view for people: say what went wrong instead of failing the whole page
        return f"(uops unavailable: {type(e).__name__}: {e})"


def _kind(runner: Any) -> str:
    return getattr(runner, "graph_kind", "") or type(runner).__name__.lower()


def snapshot(log: RunLog = RUN_LOG, trace: dict | None = None) -> dict:
    """The JSON-ready view of `log` (see the module docstring); `trace` (tinygrad/viz/trace.py) rides along."""
    items: list[dict] = []
    buffers: list[dict] = []
    edges: list[list[str]] = []
    programs: list[dict] = []
    program_of: dict[int, int] = {}
    latest: dict[int, int] = {}  # buffer number -> its newest node
    versions: dict[int, int] = {}  # buffer number -> how many nodes it has

    def new_node(meta: tuple) -> int:
        num, device, size, dtype = meta
        node = len(buffers)
        version = versions.get(num, 0)
        versions[num] = version + 1
        buffers.append({"id": node, "buffer": num, "version": version, "device": device, "size": size,
                        "dtype": dtype})
        latest[num] = node
        return node

    for i, e in enumerate(log.entries):
        prog = None
        spec = getattr(e.runner, "spec", None)
        if spec is not None:
            prog = program_of.get(id(e.runner))
            if prog is None:
                prog = program_of[id(e.runner)] = len(programs)
                opts = tuple(spec.applied_opts)
                programs.append({"id": prog, "name": e.runner.display_name, "device": e.runner.dname,
                                 "ast": print_ast(e.ast), "opts": opts_text(opts) if opts else "[]",
                                 "uops": uops_text(e.runner.dname, e.ast, opts), "src": spec.src,
                                 "global_size": _dims(spec.global_size), "local_size": _dims(spec.local_size),
                                 "runs": 0, "time_s": 0.0})
            programs[prog]["runs"] += 1
            programs[prog]["time_s"] += e.time_s or 0.0
        inputs = []
        for meta in e.bufs[e.n_outputs:]:
            node = latest.get(meta[0])
            inputs.append(node if node is not None else new_node(meta))
        outputs = [new_node(meta) for meta in e.bufs[:e.n_outputs]]
        edges += [[f"b{b}", f"k{i}"] for b in inputs] + [[f"k{i}", f"b{b}"] for b in outputs]
        items.append({"id": i, "kind": _kind(e.runner), "name": e.name, "device": e.device, "program": prog,
                      "time_s": e.time_s, "inputs": inputs, "outputs": outputs})
    return {"items": items, "buffers": buffers, "edges": edges, "programs": programs, "dropped": log.dropped,
            "trace": trace}


def _dims(dims) -> list | None:
    return None if dims is None else [d if type(d) is int else str(d) for d in dims]
