"""Runs a tensor's last kernel on its own device linearized with exactly the Opts a test names (none: the plain
kernel), so that a device's optimised kernels can be checked against its unoptimised ones and against numpy."""
import dataclasses

import numpy as np

from tinygrad import Device, Tensor, dtypes
from tinygrad.codegen.kernel import Opt, OptOps
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
        spec = dataclasses.replace(dev.renderer(lin.name, lin.uops), global_size=lin.global_size,
                                   local_size=lin.local_size, vars=lin.vars)
        runner = CompiledRunner(spec, dname)
        ExecItem(runner, list(si.bufs)).run(var_vals)
        out = si.outputs[0]
        if out.dtype == dtypes.bfloat16:  # numpy has no bfloat16: its bits are a float32's upper half
            got = (np.frombuffer(out.as_buffer(), np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            got = out.numpy().astype(np.float32)
        ret.append((got.reshape(t.shape), lin))
    return ret


def tc_matches_plain(t: Tensor, cfg: int, frag: str, want: np.ndarray, cpu: Tensor | None = None,
                     tol: float = 2e-2) -> Linearizer:
    """`t`'s last kernel with TC config `cfg` took the tensor core whose fragments load as `frag`, and its output
    equals the plain kernel's, `want` (numpy) and, given, `cpu` (the same on the CPU device). Returns its
    linearizer."""
    (got, lin), (ref, _) = run_with_opts(t, [Opt(OptOps.TC, 0, cfg)], [])
    assert lin.tc is not None and lin.tc.tc.frag == frag
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    if cpu is not None:
        np.testing.assert_allclose(got, cpu.numpy().astype(np.float32), rtol=tol, atol=tol)
    return lin
