"""The GPU render loop (renderer/gpu.py) is language-neutral: a GPULanguage with other spellings for every slot
renders the same kernels with none of CUDA's words left in them."""
import re

from tinygrad import Tensor
from tinygrad.codegen.kernel import LinearizerOptions
from tinygrad.codegen.linearizer import Linearizer
from tinygrad.engine.schedule import create_schedule_with_vars
from tinygrad.ops import BufferOps
from tinygrad.renderer.gpu import GPULanguage, uops_to_gpu

OPTS = LinearizerOptions("TOYGPU", has_local=True, has_shared=True, supports_upcast=True, max_vector_bytes=16)


class ToyGPULanguage(GPULanguage):
    name = "TOYGPU"
    kernel_prefix = "kernel void "
    block_idx_fmt = "tg_gid.{}"
    thread_idx_fmt = "tg_lid.{}"
    block_dim_fmt = "tg_bdim.{}"
    grid_dim_fmt = "tg_gdim.{}"
    shared_prefix = "threadgroup "
    device_var_prefix = "device "
    barrier = "threadgroup_barrier();"
    fence = "device_fence();"
    warp_size = 64

    def render_shuffle_down(self, val: str, offset: str) -> str:
        return f"simd_down({val}, {offset})"

    def render_atomic_inc(self, var: str) -> str:
        return f"atomic_inc(&{var})"

    def render_kernel(self, name, body, params, launch_bounds=None) -> str:
        args = ", ".join(p[0] for p in params)
        return f"{self.kernel_prefix}{name}({args}) {{\n" + "\n".join(body) + "\n}\n"


def render(t: Tensor, grid: bool) -> list[str]:
    out = []
    for si in create_schedule_with_vars([t.lazydata])[0]:
        if si.ast[0].op is BufferOps.STORE:
            lin = Linearizer(si.ast, OPTS)
            lin.gpu = lin.gpu and grid
            lin.linearize()
            out.append(uops_to_gpu(ToyGPULanguage(), lin.name, lin.uops).src)
    return out


CUDA_WORDS = re.compile(r"blockIdx|threadIdx|blockDim|gridDim|__shared__|__syncthreads|__shfl|atomicAdd|"
                        r"__threadfence|__device__|__global__")


def test_every_spelling_comes_from_the_language():
    a = Tensor.empty(40, 300).realize()
    srcs = render(a * 2 + 1, grid=True) + render(a.max(axis=1), grid=True) + \
        render(Tensor.empty(1 << 17).realize().sum(), grid=False) + render(a @ Tensor.empty(300, 64), grid=True)
    assert len(srcs) == 4
    for src in srcs:
        assert not CUDA_WORDS.search(src), src
    whole = "\n".join(srcs)
    # the one-big-reduction path uses every slot: shared memory, barriers, shuffles, the fence and the atomic
    for word in ("tg_gid.x", "tg_lid.x", "threadgroup ", "threadgroup_barrier();", "simd_down(", "device_fence();",
                 "atomic_inc(&tg_done)", "device unsigned int tg_done;", "kernel void "):
        assert word in whole, word
    # a warp of 64: the shuffle tree starts at 32 lanes and one partial slot serves each warp of a 1024 block
    assert "tg_s = 32;" in whole and "tg_red[16]" in whole and "& 63u" in whole
