"""Movement and indexing ops against PyTorch (and numpy where PyTorch lacks the feature), forward and backward."""
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from op_helper import helper_test_op

from tinygrad import Tensor, dtypes
from tinygrad.helpers import GlobalCounters


def both(torch_fxn, tiny_fxn):
    """One function for helper_test_op that dispatches on the tensor type."""
    return lambda *a: torch_fxn(*a) if isinstance(a[0], torch.Tensor) else tiny_fxn(*a)


def check_forward(arr, fxn, tiny_fxn=None):
    """Forward-only comparison of an int/bool (or any) array against torch."""
    got = (tiny_fxn or fxn)(Tensor(arr))
    want = fxn(torch.tensor(arr))
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_zero_size_kernel_under_pad():
    np.testing.assert_array_equal(Tensor.ones(2, 3)[:0].exp().pad(((0, 1), None)).numpy(), np.zeros((1, 3)))


INT = np.arange(24, dtype=np.int32).reshape(2, 3, 4) - 7
BOOL = (np.arange(24).reshape(2, 3, 4) % 3 == 0)


# ---- reshapes and views ----

@pytest.mark.parametrize("shape,new", [((2, 3, 4), (6, 4)), ((2, 3, 4), (-1, 4)), ((2, 3, 4), (4, -1)),
                                       ((2, 3, 4), (24,)), ((1,), ()), ((), (1, 1)), ((0, 3), (-1, 3)),
                                       ((0, 3), (3, 0)), ((2, 1, 4), (2, 4, 1))])
def test_reshape_view(shape, new):
    helper_test_op([shape], lambda x: x.reshape(new))
    helper_test_op([shape], lambda x: x.view(*new) if new else x.view(()))


def test_reshape_errors():
    with pytest.raises(ValueError, match="reshape"):
        Tensor.ones(2, 3).reshape(4, -1)
    with pytest.raises(ValueError, match="inferred"):
        Tensor.ones(2, 3).reshape(-1, -1)
    with pytest.raises(ValueError):
        Tensor.ones(0, 3).reshape(0, -1)


def test_permute_transpose_T():
    helper_test_op([(2, 3, 4)], lambda x: x.permute(2, 0, 1))
    helper_test_op([(2, 3, 4)], lambda x: x.permute(-1, 0, -2))
    helper_test_op([(2, 3, 4)], lambda x: x.transpose(-1, 0))
    helper_test_op([(3, 4)], lambda x: x.T)
    helper_test_op([(2, 3, 4)], lambda x: x.permute(2, 1, 0), lambda x: x.T)
    helper_test_op([(0, 3)], lambda x: x.T)
    helper_test_op([(5,)], lambda x: x.T if isinstance(x, Tensor) else x)
    check_forward(INT, lambda x: x.permute(1, 2, 0))
    with pytest.raises(ValueError, match="permutation"):
        Tensor.ones(2, 3).permute(0, 0)


def test_expand():
    helper_test_op([(3, 1)], lambda x: x.expand(3, 4))
    helper_test_op([(3, 1)], lambda x: x.expand(2, -1, 4))
    helper_test_op([(1, 1)], lambda x: x.expand(0, 3))
    helper_test_op([()], lambda x: x.expand(2, 3))
    check_forward(BOOL[:, :1], lambda x: x.expand(-1, 5, -1))
    with pytest.raises(ValueError, match="expand"):
        Tensor.ones(3, 2).expand(3, 4)


def test_flatten_unflatten():
    helper_test_op([(2, 3, 4)], lambda x: x.flatten())
    helper_test_op([(2, 3, 4)], lambda x: x.flatten(1))
    helper_test_op([(2, 3, 4, 5)], lambda x: x.flatten(1, -2))
    helper_test_op([()], lambda x: x.flatten())
    helper_test_op([(2, 0, 3)], lambda x: x.flatten(0, 1))
    helper_test_op([(2, 12)], lambda x: x.unflatten(1, (3, 4)))
    helper_test_op([(2, 12)], lambda x: x.unflatten(-1, (-1, 2, 2)))
    check_forward(INT, lambda x: x.flatten(1).unflatten(1, (4, 3)))


def test_squeeze_unsqueeze():
    helper_test_op([(2, 1, 3, 1)], lambda x: x.squeeze())
    helper_test_op([(2, 1, 3, 1)], lambda x: x.squeeze(1))
    helper_test_op([(2, 1, 3, 1)], lambda x: x.squeeze(-1))
    helper_test_op([(2, 1, 3, 1)], lambda x: x.squeeze(0))
    helper_test_op([(2, 1, 3, 1)], lambda x: x.squeeze((1, -1)))
    helper_test_op([()], lambda x: x.squeeze(0))
    helper_test_op([(1, 0)], lambda x: x.squeeze())
    helper_test_op([(2, 3)], lambda x: x.unsqueeze(0).unsqueeze(-1).unsqueeze(2))
    helper_test_op([()], lambda x: x.unsqueeze(-1))
    helper_test_op([()], lambda x: x.reshape(1, 1))
    check_forward(BOOL, lambda x: x.unsqueeze(1).squeeze(1))
    with pytest.raises(IndexError, match="dimension"):
        Tensor.ones(2, 3).unsqueeze(4)


def test_contiguous():
    helper_test_op([(3, 4)], lambda x: x.T.contiguous() * 2)


def test_shrink_flip():
    helper_test_op([(4, 5)], lambda x: x[1:3, 0:5], lambda x: x.shrink(((1, 3), None)))
    helper_test_op([(4, 5)], lambda x: x[0:0, 2:4], lambda x: x.shrink(((0, 0), (2, 4))))
    helper_test_op([(2, 3, 4)], lambda x: x.flip(0, 2), lambda x: x.flip((0, 2)))
    helper_test_op([(2, 3, 4)], lambda x: x.flip(-1))
    helper_test_op([(0, 3)], lambda x: x.flip(1))
    check_forward(INT, lambda x: x.flip((1,)), lambda x: x.flip(1))
    with pytest.raises(ValueError, match="shrink"):
        Tensor.ones(3).shrink(((1, 4),))


# ---- pad ----

def tpad(pad, **kw):
    return lambda x: torch.nn.functional.pad(x, pad, **kw)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("pad", [(1, 2), (2, 0, 1, 1), (0, 3, 2, 2)])
def test_pad_modes(mode, pad):
    helper_test_op([(2, 3, 4)], tpad(pad, mode=mode), lambda x: x.pad(pad, mode=mode))


def test_pad_forms():
    helper_test_op([(2, 3)], tpad((1, 2, 0, 1)), lambda x: x.pad(((0, 1), (1, 2))))
    helper_test_op([(2, 3)], tpad((1, 2, 0, 1)), lambda x: x.pad((1, 2, 0, 1)))
    helper_test_op([(2, 3)], tpad((1, 1), value=5.0), lambda x: x.pad((None, (1, 1)), value=5.0))
    helper_test_op([(2, 3)], tpad((1, 1), value=-np.inf), lambda x: x.pad((1, 1), -np.inf))
    helper_test_op([(2, 3, 4)], tpad((-1, 2, 1, -1)), lambda x: x.pad((-1, 2, 1, -1)))
    helper_test_op([(2, 3, 4)], tpad((1, 1, 1, 1), mode="reflect"),
                   lambda x: x.pad((None, (1, 1), (1, 1)), mode="reflect"))
    helper_test_op([(0, 3)], tpad((1, 2)), lambda x: x.pad((1, 2)))
    helper_test_op([(1, 4, 4)], tpad((1, 2, 3, 0), mode="reflect"), lambda x: x.pad((1, 2, 3, 0), "reflect"))
    check_forward(INT, tpad((1, 2), value=3), lambda x: x.pad((1, 2), value=3))
    check_forward(BOOL, tpad((1, 0, 0, 2)), lambda x: x.pad((1, 0, 0, 2)))
    check_forward(INT, tpad((1, 2, 2, 1), mode="reflect"), lambda x: x.pad((1, 2, 2, 1), mode="reflect"))


def test_pad_errors():
    with pytest.raises(ValueError, match="reflect"):
        Tensor.ones(2, 3).pad((3, 0), mode="reflect")
    with pytest.raises(ValueError, match="mode"):
        Tensor.ones(2, 3).pad((1, 0), mode="wrap")
    with pytest.raises(ValueError):
        Tensor.ones(2, 3).pad((1, 0, 1))


# ---- repeats ----

def test_repeat_tile_interleave():
    helper_test_op([(2, 3)], lambda x: x.repeat(2, 3))
    helper_test_op([(2, 3)], lambda x: x.repeat(2, 1, 2))
    helper_test_op([(2, 3)], lambda x: x.repeat(0, 2))
    helper_test_op([()], lambda x: x.repeat(3))
    helper_test_op([(2, 3)], lambda x: x.tile((2,)))
    helper_test_op([(2, 3)], lambda x: x.tile((2, 1, 2)))
    helper_test_op([(2, 3)], lambda x: x.repeat_interleave(2, dim=1))
    helper_test_op([(2, 3)], lambda x: x.repeat_interleave(3))
    helper_test_op([(2, 3)], lambda x: x.repeat_interleave(torch.tensor([1, 0, 2]), dim=-1),
                   lambda x: x.repeat_interleave([1, 0, 2], dim=-1))
    check_forward(BOOL, lambda x: x.repeat(1, 2, 1))
    with pytest.raises(ValueError, match="repeat"):
        Tensor.ones(2, 3).repeat(2)


# ---- joining and splitting ----

def test_cat():
    helper_test_op([(2, 3), (4, 3)], lambda a, b: torch.cat([a, b], 0), lambda a, b: a.cat(b, dim=0))
    helper_test_op([(2, 3), (2, 1), (2, 2)], lambda a, b, c: torch.cat([a, b, c], -1),
                   lambda a, b, c: Tensor.cat([a, b, c], dim=-1))
    helper_test_op([(2, 3), (0, 3)], lambda a, b: torch.cat([a, b]), lambda a, b: Tensor.cat(a, b))
    helper_test_op([(2, 3)], lambda a: torch.cat([a]), lambda a: a.cat())
    check_forward(BOOL, lambda x: torch.cat([x, ~x], 1), lambda x: x.cat(x.logical_not(), dim=1))
    got = Tensor([1, 2]).cat(Tensor([0.5]))
    assert got.dtype == dtypes.float32 and got.numpy().tolist() == [1.0, 2.0, 0.5]
    with pytest.raises(ValueError, match="cat"):
        Tensor.ones(2, 3).cat(Tensor.ones(2, 4))


def test_stack():
    helper_test_op([(2, 3), (2, 3)], lambda a, b: torch.stack([a, b], 1), lambda a, b: Tensor.stack([a, b], dim=1))
    helper_test_op([(2, 3)] * 3, lambda a, b, c: torch.stack([a, b, c], -1), lambda a, b, c: a.stack(b, c, dim=-1))
    helper_test_op([()] * 2, lambda a, b: torch.stack([a, b]), lambda a, b: Tensor.stack([a, b]))
    check_forward(INT, lambda x: torch.stack([x, x + 1], 0), lambda x: Tensor.stack([x, x + 1], 0))
    with pytest.raises(ValueError, match="stack"):
        Tensor.stack([Tensor.ones(2), Tensor.ones(3)])


@pytest.mark.parametrize("sizes,dim", [(2, 0), (3, 1), ([1, 3, 1], 1), ([5], -1), (10, 1), ([0, 5], 1)])
def test_split(sizes, dim):
    helper_test_op([(4, 5)], lambda x: torch.stack([p.sum() for p in x.split(sizes, dim)]),
                   lambda x: Tensor.stack([p.sum() for p in x.split(sizes, dim)]))
    t = Tensor(np.arange(20, dtype=np.float32).reshape(4, 5))
    tt = torch.arange(20.0).reshape(4, 5)
    for a, b in zip(t.split(sizes, dim), tt.split(sizes, dim), strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.parametrize("n,chunks", [(5, 3), (6, 4), (6, 6), (0, 3), (1, 2)])
def test_chunk(n, chunks):
    tt = torch.arange(float(n) * 2).reshape(2, n)
    got = Tensor(tt.numpy()).chunk(chunks, dim=-1)
    want = tt.chunk(chunks, dim=-1)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    helper_test_op([(3, 6)], lambda x: torch.cat([p * (i + 1) for i, p in enumerate(x.chunk(4, 1))], 1),
                   lambda x: Tensor.cat([p * (i + 1) for i, p in enumerate(x.chunk(4, 1))], dim=1))


# ---- basic indexing ----

BASIC = [
    (1,), (-1,), (slice(1, 3),), (slice(None, None, 2),), (Ellipsis, 1), (None, 0, Ellipsis, None),
    (slice(-3, None), -2, slice(None, None, 3)), (slice(5, 1),), (Ellipsis,), (slice(None), None, slice(1, 4, 2)),
    (0, 0, 0), (slice(None, 100), slice(-100, 2)),
]


@pytest.mark.parametrize("idx", BASIC, ids=str)
def test_basic_index(idx):
    helper_test_op([(3, 4, 5)], lambda x: x[idx])
    check_forward(INT, lambda x: x[idx[:3]] if len(idx) > 3 else x[idx])


NEG_STEPS = [(slice(None, None, -1),), (slice(None), slice(None, None, -2)), (slice(3, 0, -2), 1),
             (slice(None, None, -3), Ellipsis, slice(1, None, -1)), (slice(0, 2, -1),)]


@pytest.mark.parametrize("idx", NEG_STEPS, ids=str)
def test_negative_steps_against_numpy(idx):
    arr = np.arange(60, dtype=np.float32).reshape(4, 3, 5)
    np.testing.assert_array_equal(Tensor(arr)[idx].numpy(), arr[idx])
    np.testing.assert_array_equal(Tensor(BOOL)[idx].numpy(), BOOL[idx])


def test_negative_step_gradient():
    helper_test_op([(6, 5)], lambda x: x.flip(1)[:, ::2], lambda x: x[:, ::-2])
    helper_test_op([(6, 5)], lambda x: x[1:5].flip(0)[::3], lambda x: x[4:0:-3])


def test_index_zero_size_and_size_one():
    helper_test_op([(0, 4)], lambda x: x[:, 1:3])
    helper_test_op([(3, 0)], lambda x: x[1])
    helper_test_op([(1, 1)], lambda x: x[0, -1])
    helper_test_op([()], lambda x: x[None, ..., None])
    helper_test_op([()], lambda x: x[...])
    helper_test_op([(4,)], lambda x: x[3:1])


def test_index_errors():
    with pytest.raises(IndexError, match="dimension 1 with size 4"):
        Tensor.ones(3, 4)[0, 4]
    with pytest.raises(IndexError, match="dimension 0 with size 3"):
        Tensor.ones(3, 4)[-4]
    with pytest.raises(IndexError, match="too many"):
        Tensor.ones(3)[0, 0]
    with pytest.raises(IndexError, match="ellipsis"):
        Tensor.ones(3)[..., ...]
    with pytest.raises(IndexError, match="int"):
        Tensor.ones(3)[Tensor([0.5])]
    with pytest.raises(ValueError, match="step"):
        Tensor.ones(3)[::0]
    with pytest.raises(IndexError, match="broadcast"):
        Tensor.ones(3, 3)[[0, 1], [0, 1, 2]]
    with pytest.raises(IndexError, match="index 3 is out of bounds for dimension 1 with size 3"):
        Tensor.ones(3, 3)[..., [0, 3]]
    with pytest.raises(IndexError, match="index -4 is out of bounds for dimension 0 with size 3"):
        Tensor.ones(3, 3)[[[-4]]]
    with pytest.raises(IndexError, match="mask"):
        Tensor.ones(3, 3)[:, [True, False]]


# ---- advanced indexing ----

ADVANCED = [
    ([0, 2],), ([[0, 1], [2, -1]],), (slice(None), [0, -1, 2]), ([0, 2], [1, 3]), ([[0], [2]], [1, 3]),
    (slice(None), [0, 1], None, [0, 1]), ([0, 1], 0, [0, 1]), (slice(None), 0, [1, 2]),
    (slice(None), [0, 1], Ellipsis, [1, 2]), (None, [1], slice(None), [0, 1], None), (slice(1, 3), [2, 2, 0]),
    (Ellipsis, [4, -5]), ([1, 1, 1], slice(None, None, 2), 3), ([], slice(None)), ([True, False, True],),
]


def as_torch_index(idx):
    return tuple(torch.tensor(i) if isinstance(i, np.ndarray) else i for i in idx)


@pytest.mark.parametrize("idx", ADVANCED, ids=str)
def test_advanced_index(idx):
    helper_test_op([(3, 4, 5)], lambda x: x[idx])


def test_advanced_index_tensors():
    i, j = np.array([[2, 0], [1, -3]], np.int32), np.array([3, -1], np.int64)
    helper_test_op([(3, 4, 5)], lambda x: x[torch.tensor(i), :, torch.tensor(j)], lambda x: x[Tensor(i), :, Tensor(j)])
    helper_test_op([(3, 4, 5)], lambda x: x[1:, torch.tensor(j)], lambda x: x[1:, Tensor(j)])
    # a 0-d tensor index acts as an int for placement
    helper_test_op([(3, 4, 5)], lambda x: x[torch.tensor(1), :, [1, 2]], lambda x: x[Tensor(1), :, [1, 2]])
    # repeated indices accumulate their gradients
    helper_test_op([(4,)], lambda x: x[[1, 1, 3, 1]])
    check_forward(INT, lambda x: x[[1, 0], :, [3, -1]])
    check_forward(BOOL, lambda x: x[:, [2, 0, 0]])
    check_forward(INT.astype(np.int8), lambda x: x[[1, 0], [-1]])
    helper_test_op([(0, 4)], lambda x: x[:, [1, 2]])
    helper_test_op([(3, 4)], lambda x: x[[], [], ] if isinstance(x, torch.Tensor) else x[[], []])


def test_advanced_index_is_fused():
    x = Tensor(np.arange(20, dtype=np.float32).reshape(4, 5)).realize()
    idx = Tensor([3, 0, -1]).realize()
    GlobalCounters.kernel_count = 0
    x[idx, 1:].realize()
    assert GlobalCounters.kernel_count == 1


@st.composite
def index_case(draw):
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.sampled_from([1, 2, 3, 4]), min_size=ndim, max_size=ndim)))
    idx, dim = [], 0
    ellipsis = draw(st.booleans())
    n_use = draw(st.integers(0, ndim))
    ell_at = draw(st.integers(0, n_use)) if ellipsis else None
    list_len = draw(st.integers(1, 3))  # one length, so that the index lists broadcast together
    for k in range(n_use + 1):
        if k == ell_at:
            idx.append(Ellipsis)
        while draw(st.integers(0, 4)) == 0:
            idx.append(None)
        if k == n_use:
            break
        size = shape[dim] if ell_at is None or k < ell_at else shape[ndim - n_use + k]
        kind = draw(st.sampled_from(["int", "slice", "list", "list2", "tensor0"]))
        if kind == "int":
            idx.append(draw(st.integers(-size, size - 1)))
        elif kind == "slice":
            start, stop = draw(st.one_of(st.none(), st.integers(-5, 5))), draw(st.one_of(st.none(), st.integers(-5, 5)))
            idx.append(slice(start, stop, draw(st.sampled_from([None, 1, 2, 3, -1, -2]))))
        elif kind == "list":
            vals = draw(st.lists(st.integers(-size, size - 1), min_size=list_len, max_size=list_len))
            idx.append(np.array(vals, np.int32))
        elif kind == "list2":
            idx.append(np.array(draw(st.lists(st.integers(-size, size - 1), min_size=2, max_size=2)),
                                np.int32).reshape(2, 1))
        else:
            idx.append(np.array(draw(st.integers(-size, size - 1)), np.int32))
        dim += 1
    return shape, tuple(idx)


def torch_equivalent(shape, idx):
    """Torch has no negative steps: flip those dims first and use the mirrored positive slice."""
    n_real = sum(1 for i in idx if i is not None and i is not Ellipsis)
    flips, out, dim = [], [], 0
    for i in idx:
        if i is Ellipsis:
            out.append(i)
            dim += len(shape) - n_real
            continue
        if i is None:
            out.append(i)
            continue
        if isinstance(i, slice) and i.step is not None and i.step < 0:
            r = range(*i.indices(shape[dim]))
            n = shape[dim]
            out.append(slice(n - 1 - r[0], n - r[-1], -i.step) if len(r) else slice(0, 0))
            flips.append(dim)
        else:
            out.append(torch.tensor(i) if isinstance(i, np.ndarray) else i)
        dim += 1
    return flips, tuple(out)


@settings(max_examples=100, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.large_base_example, HealthCheck.too_slow])
@given(index_case())
def test_index_fuzz(case):
    shape, idx = case
    flips, tidx = torch_equivalent(shape, idx)
    tiny_idx = tuple(Tensor(i) if isinstance(i, np.ndarray) else i for i in idx)
    helper_test_op([shape], lambda x: (x.flip(flips) if flips else x)[tidx], lambda x: x[tiny_idx])


@settings(max_examples=50, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.large_base_example, HealthCheck.too_slow])
@given(index_case())
def test_setitem_fuzz(case):
    shape, idx = case
    flips, tidx = torch_equivalent(shape, idx)
    arr = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    want = torch.tensor(arr).flip(flips) if flips else torch.tensor(arr)
    positions = torch.arange(arr.size).reshape(shape).flip(flips)[tidx]
    # repeated positions get one scalar (which of several writes wins is unspecified in PyTorch)
    unique = positions.unique().numel() == positions.numel()
    val = -np.arange(positions.numel(), dtype=np.float32).reshape(positions.shape) - 1 if unique else -5.0
    want[tidx] = torch.tensor(val) if unique else val
    x = Tensor(arr).realize()
    x[tuple(Tensor(i) if isinstance(i, np.ndarray) else i for i in idx)] = Tensor(val) if unique else val
    np.testing.assert_array_equal(x.numpy(), (want.flip(flips) if flips else want).numpy())


# ---- gather ----

@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gather(dim):
    rng = np.random.default_rng(0)
    shape = (3, 4, 5)
    idx_shape = tuple(2 if d == (dim % 3) else s - 1 for d, s in enumerate(shape))
    idx = rng.integers(0, shape[dim], size=idx_shape).astype(np.int64)
    helper_test_op([shape], lambda x: x.gather(dim, torch.tensor(idx)), lambda x: x.gather(dim, Tensor(idx)))
    check_forward(INT, lambda x: x.gather(dim, torch.tensor(idx[:2, :3, :4] % 2)),
                  lambda x: x.gather(dim, Tensor(idx[:2, :3, :4] % 2)))


def test_gather_edge_cases():
    idx = np.array([[0, 0], [1, 0]], np.int64)
    helper_test_op([(2, 2)], lambda x: x.gather(1, torch.tensor(idx)), lambda x: x.gather(Tensor(idx), 1))
    helper_test_op([(2, 3)], lambda x: x.gather(1, torch.zeros(2, 0, dtype=torch.long)),
                   lambda x: x.gather(1, Tensor.zeros(2, 0, dtype=dtypes.int64)))
    with pytest.raises(TypeError):
        Tensor.ones(2, 2).gather(0, Tensor([[0.0, 1.0]]))


# ---- setitem and assign ----

def realized(arr):
    return Tensor(arr).realize()


SETITEMS = [
    (1, 7.0), ((slice(None), 2), -1.0), ((slice(None, None, 2), slice(1, None, 2)), 5.0),
    ((Ellipsis, slice(None, None, -2)), np.arange(3, dtype=np.float32)), ((-1, slice(3, 0, -1)), 9.0),
    ((None, 0), np.ones((1, 1, 5), np.float32) * 3), (([0, 2], [1, -1]), np.array([7.0, 8.0], np.float32)),
    ((slice(None), [4, 0]), np.array([[1.0], [2.0], [3.0], [4.0]], np.float32)), (([[1], [3]], 1), 2.5),
]


@pytest.mark.parametrize("idx,val", SETITEMS, ids=str)
def test_setitem(idx, val):
    arr = np.arange(20, dtype=np.float32).reshape(4, 5)
    x = realized(arr)
    before, view = id(x), x.reshape(20)[5:]
    x[idx] = Tensor(val) if isinstance(val, np.ndarray) else val
    want = arr.copy()
    want[idx] = val
    assert id(x) == before
    np.testing.assert_array_equal(x.numpy(), want)
    # a view taken before the write sees the new value
    np.testing.assert_array_equal(view.numpy(), want.reshape(20)[5:])


def test_setitem_dtypes_and_targets():
    x = realized(INT.copy())
    x[0, 1:, [0, 3]] = Tensor([100, 200])
    want = torch.tensor(INT)
    want[0, 1:, [0, 3]] = torch.tensor([100, 200], dtype=torch.int32)  # torch places the list's dim last here
    np.testing.assert_array_equal(x.numpy(), want.numpy())
    b = realized(BOOL.copy())
    b[:, 0] = True
    want = BOOL.copy()
    want[:, 0] = True
    np.testing.assert_array_equal(b.numpy(), want)
    # an unrealized target (a constant) becomes a buffer holding the result
    z = Tensor.zeros(3, 4)
    z[1] = Tensor.arange(4).float()
    np.testing.assert_array_equal(z.numpy(), np.array([[0, 0, 0, 0], [0, 1, 2, 3], [0, 0, 0, 0]], np.float32))
    z[Tensor([2]), 0] = 9
    assert z.numpy()[2, 0] == 9
    # values broadcast, with extra leading 1 dims dropped
    y = realized(np.zeros((2, 3), np.float32))
    y[:] = Tensor([[[1.0, 2.0, 3.0]]])
    np.testing.assert_array_equal(y.numpy(), [[1, 2, 3], [1, 2, 3]])
    y[1:, 5:] = 4.0  # an empty selection writes nothing
    np.testing.assert_array_equal(y.numpy(), [[1, 2, 3], [1, 2, 3]])


def test_setitem_repeated_index_last_wins():
    y = realized(np.zeros(4, np.float32))
    y[[1, 1, 3]] = Tensor([1.0, 2.0, 3.0])
    np.testing.assert_array_equal(y.numpy(), [0, 2, 0, 3])
    z = realized(np.zeros((2, 3), np.float32))
    z[Tensor(1), [0, 2]] = 4.0
    np.testing.assert_array_equal(z.numpy(), [[0, 0, 0], [4, 0, 4]])


def test_setitem_errors():
    x = realized(np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match="broadcast"):
        x[0] = Tensor([1.0, 2.0])
    with pytest.raises(IndexError, match="size 2"):
        x[2] = 1.0
    with pytest.raises(NotImplementedError, match="grad"):
        Tensor([1.0, 2.0], requires_grad=True)[0] = 3.0


def test_assign():
    x = realized(np.zeros(3, np.float32))
    before = id(x)
    x.assign(x + 1)
    x += 1
    assert id(x) == before
    np.testing.assert_array_equal(x.numpy(), [2, 2, 2])
    with pytest.raises(ValueError, match="shape"):
        x.assign(Tensor.ones(4))


# ---- kernel counts ----

def test_view_chain_is_one_kernel():
    x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4)).realize()
    GlobalCounters.kernel_count = 0
    out = (x.permute(1, 0).reshape(-1)[::2] * 2).realize()
    assert GlobalCounters.kernel_count == 1
    np.testing.assert_array_equal(out.numpy(), np.arange(12).reshape(3, 4).T.reshape(-1)[::2] * 2)


def test_cat_is_one_kernel():
    a, b = Tensor.ones(2, 3).contiguous().realize(), Tensor.zeros(1, 3).contiguous().realize()
    GlobalCounters.kernel_count = 0
    a.cat(b, a, dim=0).realize()
    assert GlobalCounters.kernel_count == 1
