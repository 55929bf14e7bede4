"""Runs a tensor's last kernel on its own device linearized with exactly the Opts a test names (none: the plain
kernel), so that a device's optimised kernels can be checked against its unoptimised ones and against numpy."""
import numpy as np

from tinygrad import Device, Tensor, dtypes
from tinygrad.codegen.linearizer import Linearizer
from tinygrad.engine.realize import CompiledRunner, ExecItem, run_schedule
from tinygrad.engine.schedule import create_schedule_with_vars
from tinygrad.helpers import Context


def run_with_opts(t: Tensor, *variants: list) -> list[tuple[np.ndarray, Linearizer]]:
    """For each list of Opts: the output of `t`'s last kernel linearized with them (as float32) and its linearizer.
    The kernels before it run once, as usual."""
    sched, var_vals = create_schedule_with_vars([t.lazydata])
    run_schedule(sched[:-1], var_vals)
    si = sched[-1]
    dname = si.outputs[0].device
    dev = Device[dname]
    ret = []
    for opts in variants:
        lin = Linearizer(si.ast, dev.linearizer_opts)
        for o in opts:
            lin.apply_opt(o)
        with Context(NOOPT=1):
            lin.linearize()
        runner = CompiledRunner(lin.name, dev.renderer(lin.name, lin.uops), dname, lin.global_size, lin.local_size,
                                lin.vars)
        ExecItem(runner, list(si.bufs)).run(var_vals)
        out = si.outputs[0]
        if out.dtype == dtypes.bfloat16:  # numpy has no bfloat16: its bits are a float32's upper half
            got = (np.frombuffer(out.as_buffer(), np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            got = out.numpy().astype(np.float32)
        ret.append((got.reshape(t.shape), lin))
    return ret
