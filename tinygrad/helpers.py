"""Small shared helpers, and the one registry of every environment knob tinygrad reads.

Every knob the library reads is declared in KNOBS below with its default and meaning (docs/env.md is checked
against this table, and every `getenv` call in the package against it, by test/unit/test_knobs.py); `getenv` itself
reads any name, since scripts read their own variables through it. The names tinygrad 0.9 exported from this module
(CI, IMAGE, THREEFRY, Profiling, temp, fetch, ...) are here too, so its scripts import unchanged.
"""
from __future__ import annotations

import contextlib
import functools
import os
import pathlib
import platform
import sys
import time
from typing import Any, Callable, Iterable, Iterator, TypeVar

T = TypeVar("T")

# The knob every device module defines by existing: `<DEVICE>=1` (CLANG=1, CPU=1, CUDA=1, ...) makes that device
# the default. Declared once here as a family, so a new runtime needs no entry of its own.
DEVICE_KNOB = "<DEVICE>"

# name -> (default, one-line meaning)
KNOBS: dict[str, tuple[Any, str]] = {
    "DEBUG": (0, "1: schedule summary, 2: one line per kernel launch with its time, 3: kernel shapes, "
                 "4: kernel source when compiled, 5: kernel AST, 6: kernel uops"),
    DEVICE_KNOB: (0, "1: make <DEVICE> the default device, for every device tinygrad.runtime has a module "
                     "ops_<device>.py for: CLANG (C kernels on host memory), CPU (numpy buffers, C kernels), CUDA, "
                     "AMD, METAL"),
    "NCCL": (1, "0: collectives between CUDA devices use the ring of copies instead of NCCL"),
    "NCCL_LIBRARY": ("", "NCCL library for CUDA collectives; default: libnccl.so.2, else the nvidia-nccl wheel's"),
    "NVRTC_PATH": ("", "NVRTC library for the CUDA device; default: libnvrtc.so.13, else libnvrtc.so.12"),
    "AMD_CLANG": ("", "clang that compiles the AMD device's kernels; default: the first of clang-19, clang-20, "
                      "clang-18, clang-17, clang on PATH that builds a test kernel for the GPU's target"),
    "CC": ("", "C compiler for the CLANG/CPU devices; default: the first of clang, cc, gcc that builds half kernels"),
    "COMPILE_TIMEOUT": (300, "seconds a kernel compile may take before it is stopped with an error (0: no limit)"),
    "CACHELEVEL": (2, "0: no on-disk cache; 1: compiled kernels are kept on disk; 2: also schedules and rendered "
                      "kernels"),
    "CACHEDB": ("", "path of the on-disk cache database; default: <user cache dir>/tinygrad/cache.db"),
    "XDG_CACHE_HOME": ("", "the user's cache directory, as the XDG spec defines it"),
    "NOOPT": (0, "1: no kernel optimisations at all, plain loops"),
    "JIT": (1, "0: TinyJit runs functions eagerly instead of capturing them"),
    "CUDA_PDL": (1, "0: CUDA graphs launch each kernel after the one before it has completed, instead of "
                    "programmatically while its last blocks finish (GPUs of compute capability 9.0 and later)"),
    "ALLOW_TF32": (0, "1: float32 matmuls and convolutions on CUDA tensor cores as TF32 (inputs rounded to 10-bit "
                      "mantissas, sums in float32: about 1e-3 relative error), as PyTorch's allow_tf32 does; sm_80 "
                      "and later"),
    "CUDA_MULTIGRAPH": (1, "0: TinyJit replays a capture spanning several CUDA GPUs (kernels, NCCL collectives, "
                           "copies) item by item instead of as one CUDA graph"),
    "VIZ": (0, "1: record every kernel, copy and buffer realized (the schedule, each kernel's AST, Opts, uops and "
                "source) and, at exit, serve them as a web page on 127.0.0.1 (python -m tinygrad.viz)"),
    "VIZ_TRACE": ("", "with VIZ=1: a Chrome trace JSON the page draws as its timeline (PROFILE=1 writes "
                      "profile.json)"),
    "FLASH_ATTENTION": (1, "0: attention stays three kernels (scores, softmax, product) instead of one with an "
                           "online softmax (engine/fuse_attention.py)"),
    "BEAM": (0, "n >= 1: search each kernel's optimisations by timing candidates on the device, a beam of n "
                 "(engine/search.py); the winners are kept in the disk cache"),
    "CI": ("", "exported as helpers.CI (true when set and not empty), as tinygrad 0.9 did, for scripts and test suites "
               "that read it; the library itself does not change its behaviour"),
    "IMAGE": (0, "exported as helpers.IMAGE for tinygrad 0.9 scripts; image dtypes (Qualcomm's texture memory) are "
                 "not supported, and the engine behaves as with 0"),
    "THREEFRY": (0, "exported as helpers.THREEFRY for tinygrad 0.9 scripts; random numbers always come from the one "
                    "generator of Tensor.manual_seed"),
    "WINO": (0, "exported as helpers.WINO for tinygrad 0.9 scripts (`Context(WINO=1)` is accepted); convolutions "
                "are computed directly either way, with the same results"),
    "RING": (1, "exported as helpers.RING for tinygrad 0.9 scripts (`Context(RING=0)` is accepted, where 0.9 chose its "
                "all-reduce algorithm by it); collectives pick theirs by device, with the same results"),
    "OMP_NUM_THREADS": ("", "OpenMP's own variable: caps the threads a large CLANG kernel splits over (1: none); "
                            "default: the CPUs this process may use, at most 8"),
    "TG_HOST_POOL": (0, "1: gcc-built threaded CLANG kernels run on tinygrad's own thread pool (runtime/include/"
                        "host_pool.h: the caller takes parts no worker has started, waits spin briefly then sleep; "
                        "for machines whose cores other jobs share); 0: on libgomp"),
    "TG_LLM_FILE_BITS": (1, "0: the LLM app's quantized matrices load as int8 planes on the CPU too "
                            "(apps/llm/linear.py), where 1 keeps the file's own bits there and dequantizes them "
                            "inside the product's kernel"),
    "TG_LLM_WORD_COLUMNS": (1, "0: the LLM app's Q4_K/Q5_K/Q6_K words stay in the file's order on a GPU "
                               "(nn/state_gguf.py), where 1 arranges them in columns at load (the same words)"),
    "DEFAULT_FLOAT": ("float", "the dtype of float data given without one (dtypes.default_float), read at import: any "
                               "float dtype's name, as in tinygrad 0.9"),
    "PROFILE": ("", "1: record a Chrome/Perfetto trace of the whole process (host spans, one span per kernel) and "
                    "write it to profile.json at exit; a path: write it there (python -m tinygrad.profile FILE)"),
    "TINYGRAD_API_KEY": ("", "the LLM server's key where --api-key is not given (python -m tinygrad.apps.llm --serve): "
                             "requests must send 'Authorization: Bearer KEY'; empty: no key"),
}


def getenv(key: str, default: Any = None) -> Any:
    """The value of environment variable `key`, converted to the type of its default: the one given, else the one
    declared in KNOBS, else 0. Any name is read (user scripts read their own variables through it); the names the
    library itself reads are all declared in KNOBS."""
    dflt = default if default is not None else KNOBS[key][0] if key in KNOBS else 0
    raw = os.environ.get(key)
    if raw is None:
        return dflt
    if isinstance(dflt, bool):
        return raw not in ("", "0")
    try:
        return type(dflt)(raw)
    except ValueError:
        raise ValueError(f"environment variable {key}={raw!r} is not a {type(dflt).__name__}") from None


class ContextVar:
    """An integer knob read once from the environment and overridable in code with `Context`."""
    _cache: dict[str, ContextVar] = {}
    __slots__ = ("key", "value")

    def __new__(cls, key: str, default: int):
        if key in ContextVar._cache:
            return ContextVar._cache[key]
        inst = super().__new__(cls)
        inst.key, inst.value = key, getenv(key, default)
        ContextVar._cache[key] = inst
        return inst

    def __bool__(self) -> bool:
        return bool(self.value)

    def __ge__(self, x) -> bool:
        return self.value >= x

    def __gt__(self, x) -> bool:
        return self.value > x

    def __lt__(self, x) -> bool:
        return self.value < x

    def __le__(self, x) -> bool:
        return self.value <= x

    def __eq__(self, x) -> bool:
        return self.value == x

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return f"ContextVar({self.key}={self.value})"


class Context(contextlib.ContextDecorator):
    """`with Context(DEBUG=4): ...` sets knobs for the block and restores them after."""

    def __init__(self, **kwargs: int):
        unknown = [k for k in kwargs if k not in ContextVar._cache]
        if unknown:
            raise KeyError(f"unknown context variable(s) {unknown}; known: {sorted(ContextVar._cache)}")
        self.kwargs = kwargs

    def __enter__(self):
        self.old = {k: ContextVar._cache[k].value for k in self.kwargs}
        for k, v in self.kwargs.items():
            ContextVar._cache[k].value = v

    def __exit__(self, *exc):
        for k, v in self.old.items():
            ContextVar._cache[k].value = v


DEBUG = ContextVar("DEBUG", 0)
NOOPT = ContextVar("NOOPT", 0)
CACHELEVEL = ContextVar("CACHELEVEL", 2)
JIT = ContextVar("JIT", 1)
BEAM = ContextVar("BEAM", 0)
FLASH_ATTENTION = ContextVar("FLASH_ATTENTION", 1)
IMAGE = ContextVar("IMAGE", 0)
THREEFRY = ContextVar("THREEFRY", 0)
WINO = ContextVar("WINO", 0)
RING = ContextVar("RING", 1)
VIZ = ContextVar("VIZ", 0)
CI = getenv("CI", "") != ""


# A Ctrl-C that lands in a finalizer (Buffer.__del__ runs wherever a refcount drops) would be printed as "Exception
# ignored" and lost: finalizers record it here instead, and the engine raises it at its next check (after each
# kernel launch, schedule and JIT replay), where the user's code is waiting.
_interrupt_pending = False


def defer_interrupt() -> None:
    """Remember a KeyboardInterrupt caught where it can't be raised (a finalizer)."""
    global _interrupt_pending
    _interrupt_pending = True


_finalizer_codes: set = set()


def _on_sigint(signum, frame) -> None:
    # NOTE: a KeyboardInterrupt raised at the first instruction of a finalizer is outside any try in it: the
    # finalizers' code objects are recognised here, on the stack of the interrupted frame, and the interrupt deferred
    f, depth = frame, 0
    while f is not None and depth < 16:
        if f.f_code in _finalizer_codes:
            defer_interrupt()
            return
        f, depth = f.f_back, depth + 1
    raise KeyboardInterrupt


def guard_finalizers(*functions) -> None:
    """Defer Ctrl-C that lands inside these finalizers (see above). Installs the SIGINT handler only where Python's
    own is in place and this is the main thread: a program's own handler is never replaced."""
    import signal
    import threading
    _finalizer_codes.update(f.__code__ for f in functions)
    if threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)


def raise_pending_interrupt() -> None:
    """Raise the KeyboardInterrupt a finalizer deferred, if any."""
    global _interrupt_pending
    if _interrupt_pending:
        _interrupt_pending = False
        raise KeyboardInterrupt


class GlobalCounters:
    """Process-wide counters the runtime bumps: kernels launched, FLOPs, bytes moved and time spent."""
    global_ops: int = 0
    global_mem: int = 0
    time_sum_s: float = 0.0
    kernel_count: int = 0
    mem_used: int = 0

    @staticmethod
    def reset() -> None:
        GlobalCounters.global_ops, GlobalCounters.global_mem = 0, 0
        GlobalCounters.time_sum_s, GlobalCounters.kernel_count = 0.0, 0


def prod(x: Iterable[T], start: Any = 1) -> Any:
    """The product of `x` (works for ints and symbolic Nodes); `start` for the empty product."""
    return functools.reduce(lambda a, b: a * b, x, start)


def dedup(x: Iterable[T]) -> list[T]:
    """`x` without repeats, first occurrence kept."""
    return list(dict.fromkeys(x))


def argfix(*x):
    """Accept `f(1, 2)` and `f((1, 2))` alike."""
    if x and isinstance(x[0], (tuple, list)):
        if len(x) != 1:
            raise ValueError(f"bad argument {x}: a sequence must be the only argument")
        return tuple(x[0])
    return x


def argsort(x: list) -> list[int]:
    return sorted(range(len(x)), key=x.__getitem__)


def all_same(items: list) -> bool:
    return all(x == items[0] for x in items)


def all_int(t) -> bool:
    return all(isinstance(s, int) for s in t)


def flatten(items: Iterable[Iterable[T]]) -> list[T]:
    return [x for sub in items for x in sub]


def toposort(root: T, parents: Callable[[T], Iterable[T]]) -> list[T]:
    """Every node reachable from `root` through `parents`, each once, parents before children. Iterative, so graphs
    of any depth work; nodes are told apart by identity."""
    order: list[T] = []
    seen: set[int] = set()
    stack: list[tuple[T, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        stack.extend((p, False) for p in reversed(list(parents(node))) if id(p) not in seen)
    return order


def round_up(num: int, amt: int) -> int:
    return (num + amt - 1) // amt * amt


def make_pair(x, cnt: int = 2) -> tuple:
    return (x,) * cnt if isinstance(x, int) else tuple(x)


def colored(st: str, color: str | None, background: bool = False) -> str:
    if color is None:
        return st
    colors = ["black", "red", "green", "yellow", "blue", "magenta", "cyan", "white"]
    return f"\u001b[{10 * background + 60 * (color.upper() == color) + 30 + colors.index(color.lower())}m{st}\u001b[0m"


def to_function_name(s: str) -> str:
    """A C identifier for a kernel name that may hold symbolic dims like `<length[4-8]>`."""
    return "".join(c if c.isalnum() or c == "_" else f"{ord(c):02X}" for c in s)


@contextlib.contextmanager
def Timing(prefix: str = "", on_exit: Callable[[int], str] | None = None, enabled: bool = True) -> Iterator[None]:
    st = time.perf_counter_ns()
    try:
        yield
    finally:
        et = time.perf_counter_ns() - st
        if enabled:
            print(f"{prefix}{et * 1e-6:6.2f} ms" + (on_exit(et) if on_exit else ""))


OSX = platform.system() == "Darwin"


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    import ctypes
    try:
        return ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError, TypeError):  # not glibc (musl, macOS, Windows)
        return None


def trim_heap() -> None:
    """Give the C heap's free pages back to the OS (glibc's malloc_trim): memory the process freed, which malloc
    otherwise keeps for reuse, resident (large buffers freed after a peak, such as a model's load temporaries).
    Nothing where the C library has no such call."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def cache_dir() -> pathlib.Path:
    """The user's cache directory for tinygrad's on-disk caches."""
    base = getenv("XDG_CACHE_HOME") or (os.path.expanduser("~/Library/Caches") if OSX else
                                        os.path.expanduser("~/.cache"))
    return pathlib.Path(base) / "tinygrad"


def ansilen(s: str) -> int:
    import re
    return len(re.sub(r"\x1b\[(K|.*?m)", "", s))


def unwrap(x: T | None) -> T:
    if x is None:
        raise ValueError("unexpected None")
    return x


def eprint(*args) -> None:
    print(*args, file=sys.stderr)


def partition(items: Iterable[T], predicate: Callable[[T], bool]) -> tuple[list[T], list[T]]:
    """(the items for which predicate holds, the others), in order."""
    yes: list[T] = []
    no: list[T] = []
    for x in items:
        (yes if predicate(x) else no).append(x)
    return yes, no


def merge_dicts(ds: Iterable[dict]) -> dict:
    """One dict of all of `ds`; a key that two of them give different values is an error."""
    out: dict = {}
    for d in ds:
        for k, v in d.items():
            if k in out and out[k] != v:
                raise ValueError(f"merge_dicts: {k!r} has two values, {out[k]!r} and {v!r}")
            out[k] = v
    return out


def get_child(obj, key: str):
    """`obj` followed along a dotted path, as state dict keys name them ("layers.0.weight"): digits index lists,
    other parts are attributes or dict keys."""
    for k in key.split("."):
        if k.isnumeric() and not isinstance(obj, dict):
            obj = obj[int(k)]
        elif isinstance(obj, dict):
            obj = obj[k]
        else:
            obj = getattr(obj, k)
    return obj


def temp(name: str) -> str:
    """A path named `name` in the system's temporary directory."""
    import tempfile
    return (pathlib.Path(tempfile.gettempdir()) / name).as_posix()


class Profiling(contextlib.ContextDecorator):
    """cProfile around a block: `with Profiling(sort="cumtime", frac=0.2): ...` prints the top `frac` of the
    functions by `sort` when the block ends (or dumps the profile to `fn` if given)."""

    def __init__(self, enabled: bool = True, sort: str = "cumtime", frac: float = 0.2, fn: str | None = None,
                 ts: float = 1):
        self.enabled, self.sort, self.frac, self.fn, self.time_scale = enabled, sort, frac, fn, 1e3 / ts

    def __enter__(self):
        import cProfile
        self.pr = cProfile.Profile()
        if self.enabled:
            self.pr.enable()
        return self

    def __exit__(self, *exc):
        if not self.enabled:
            return False
        self.pr.disable()
        if self.fn:
            self.pr.dump_stats(self.fn)
            return False
        import pstats
        stats = pstats.Stats(self.pr).strip_dirs().sort_stats(self.sort)
        stats.print_stats(self.frac)
        return False


def fetch(url: str, name: str | pathlib.Path | None = None, subdir: str | None = None,
          allow_caching: bool = True) -> pathlib.Path:
    """The file at `url`, downloaded once into tinygrad's cache directory (`name`: its file name there, or a path of
    its own). A file already at that path is used as it is and never overwritten (`allow_caching` is accepted for
    tinygrad 0.9's signature); a download goes to a temporary file beside it first, so an interrupted one leaves
    nothing behind."""
    import hashlib
    import tempfile
    import urllib.request
    if isinstance(name, pathlib.Path):
        path = name
    else:
        folder = cache_dir() / "downloads" / (subdir or "")
        path = folder / (name or hashlib.md5(url.encode()).hexdigest())
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with urllib.request.urlopen(url, timeout=60) as r:
        if r.status != 200:
            raise OSError(f"fetch {url}: HTTP status {r.status}")
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as f:
                while True:
                    chunk = r.read(1 << 20)
                    if not chunk:
                        break
                    f.write(chunk)
            if path.exists():
                # someone else made it meanwhile: theirs stays
                os.unlink(tmp)
            else:
                os.rename(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    return path


def strip_parens(fst: str) -> str:
    """`fst` without one pair of enclosing parentheses, when they enclose all of it: "(a+b)" -> "a+b"."""
    if not (fst.startswith("(") and fst.endswith(")")):
        return fst
    depth = 0
    for i, c in enumerate(fst):
        depth += (c == "(") - (c == ")")
        if depth == 0 and i != len(fst) - 1:
            return fst  # "(a)+(b)": the first parenthesis closes before the end
    return fst[1:-1]


def getbits(value: int, start: int, end: int) -> int:
    """Bits start..end (inclusive, from the least significant) of `value`."""
    return (value >> start) & ((1 << (end - start + 1)) - 1)


def i2u(bits: int, value: int) -> int:
    """A signed `bits`-bit integer as the unsigned one with the same bits."""
    return value if value >= 0 else (1 << bits) + value


def data64(data: int) -> tuple[int, int]:
    """A 64-bit value as (high 32 bits, low 32 bits)."""
    return (data >> 32) & 0xFFFFFFFF, data & 0xFFFFFFFF


def data64_le(data: int) -> tuple[int, int]:
    """A 64-bit value as (low 32 bits, high 32 bits)."""
    return data & 0xFFFFFFFF, (data >> 32) & 0xFFFFFFFF


def flat_mv(mv: memoryview) -> memoryview:
    """`mv` as one flat run of bytes (empty stays empty)."""
    return mv if len(mv) == 0 else mv.cast("B", shape=(mv.nbytes,))


def mv_address(mv: memoryview) -> int:
    """The address of a writable memoryview's first byte."""
    import ctypes
    return ctypes.addressof(ctypes.c_char.from_buffer(mv))


def to_mv(ptr: int, size: int) -> memoryview:
    """`size` bytes at address `ptr` as a writable memoryview (no copy: the memory must outlive it)."""
    import ctypes
    return memoryview((ctypes.c_uint8 * size).from_address(ptr)).cast("B")


def from_mv(mv: memoryview, to_type=None):
    """A ctypes array over the bytes of writable `mv` (no copy), of `to_type` elements (default: char)."""
    import ctypes
    to_type = to_type or ctypes.c_char
    return ctypes.cast(ctypes.addressof(to_type.from_buffer(mv)), ctypes.POINTER(to_type * len(mv))).contents


def init_c_var(ctypes_var, creat_cb: Callable):
    """`creat_cb(ctypes_var)` called for its side effect on the variable, then the variable."""
    creat_cb(ctypes_var)
    return ctypes_var


def cpu_time_execution(cb: Callable, enable: bool) -> float | None:
    """Seconds `cb()` took on the host, when `enable`; else just runs it."""
    if enable:
        st = time.perf_counter()
    cb()
    return time.perf_counter() - st if enable else None

