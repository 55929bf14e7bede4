"""assign through a view (a shrink, permute, pad, flip or stride of a realized buffer) writes into that buffer, as
tinygrad 0.9 did: the KV cache of an LLM is written one position at a time this way, at a symbolic position, also
inside TinyJit. The other elements keep their values; numpy's index arithmetic is the oracle."""
import numpy as np
import pytest

from tinygrad import Tensor, TinyJit, Variable


def buffer(shape, start=0.0):
    n = int(np.prod(shape))
    return Tensor(np.arange(start, start + n, dtype=np.float32).reshape(shape)).realize()


def test_shrink_assign_writes_into_the_buffer():
    a = buffer((4, 5))
    ref = a.numpy().copy()
    a.shrink(((1, 3), (2, 4))).assign(Tensor.full((2, 2), -1.0)).realize()
    ref[1:3, 2:4] = -1
    np.testing.assert_array_equal(a.numpy(), ref)


def test_permuted_assign():
    a = Tensor.zeros(2, 3).contiguous().realize()
    v = a.permute(1, 0).assign(Tensor.arange(6).reshape(3, 2).float())
    v.realize()
    np.testing.assert_array_equal(a.numpy(), np.arange(6).reshape(3, 2).T)
    # the view itself reads the buffer through the view
    np.testing.assert_array_equal(v.numpy(), np.arange(6).reshape(3, 2))


@pytest.mark.parametrize("view", ["flip", "stride", "pad_shrink", "reshape_permute"])
def test_views_written_through(view):
    a = buffer((4, 6))
    ref = a.numpy().copy()
    if view == "flip":
        v, rv = a.flip(1), ref[:, ::-1]
    elif view == "stride":
        v, rv = a[:, ::2], ref[:, ::2]
    elif view == "pad_shrink":
        # a pad then a shrink back inside the original: a masked view that stays in bounds
        v, rv = a.pad(((1, 1), (0, 0))).shrink(((2, 4), (0, 6))), ref[1:3, :]
    else:
        v, rv = a.reshape(2, 2, 6).permute(2, 0, 1), ref.reshape(2, 2, 6).transpose(2, 0, 1)
    new = np.random.default_rng(0).standard_normal(rv.shape).astype(np.float32)
    v.assign(Tensor(new)).realize()
    rv[...] = new
    np.testing.assert_array_equal(a.numpy(), ref)


def test_assign_reading_the_same_view_in_place():
    a = buffer((3, 4))
    ref = a.numpy().copy()
    v = a[1:, 1:3]
    v.assign(v * 2 + 1).realize()
    ref[1:, 1:3] = ref[1:, 1:3] * 2 + 1
    np.testing.assert_array_equal(a.numpy(), ref)


def test_assign_reading_other_elements_goes_through_a_temporary():
    a = buffer((2, 4))
    ref = a.numpy().copy()
    # the row 0 written from row 1 and row 0 flipped: no element may read a value already overwritten
    a[0].assign(a[1] + a[0].flip(0)).realize()
    ref[0] = ref[1] + ref[0][::-1]
    np.testing.assert_array_equal(a.numpy(), ref)
    b = buffer((5,))
    b[1:].assign(b[:-1] * 1).realize()
    np.testing.assert_array_equal(b.numpy(), [0, 0, 1, 2, 3])


def test_two_view_assigns_before_one_realize():
    a = Tensor.zeros(4).contiguous().realize()
    a[0:2].assign(Tensor.ones(2))
    v = a[0:2]
    w = v.assign(Tensor.full((2,), 5.0))
    w.realize()
    assert a.numpy()[2:].tolist() == [0, 0]
    assert a.numpy()[:2].tolist() in ([5, 5],)


def test_expanded_view_is_refused():
    a = Tensor.zeros(1, 3).contiguous().realize()
    with pytest.raises(ValueError, match="expanded"):
        a.expand(2, 3).assign(Tensor.ones(2, 3))


def test_symbolic_position_kv_cache():
    cache = Tensor.zeros(2, 8, 3).contiguous().realize()
    ref = np.zeros((2, 8, 3), np.float32)
    for pos in range(8):
        sp = Variable("start_pos", 0, 7).bind(pos)
        x = Tensor.full((2, 1, 3), float(pos + 1)).contiguous()
        cache.shrink(((0, 2), (sp, sp + 1), (0, 3))).assign(x).realize()
        ref[:, pos] = pos + 1
        # read back the first pos+1 positions at the symbolic length
        np.testing.assert_array_equal(cache.shrink(((0, 2), (0, sp + 1), (0, 3))).sum(1).numpy(),
                                      ref[:, :pos + 1].sum(1))
    np.testing.assert_array_equal(cache.numpy(), ref)


def test_kv_cache_inside_tinyjit():
    cache = Tensor.zeros(1, 6, 2).contiguous().realize()

    @TinyJit
    def step(x: Tensor, start_pos: Variable) -> Tensor:
        cache.shrink(((0, 1), (start_pos, start_pos + 1), (0, 2))).assign(x).realize()
        return cache.shrink(((0, 1), (0, start_pos + 1), (0, 2))).sum(1).realize()

    ref = np.zeros((1, 6, 2), np.float32)
    for pos in range(6):
        x = Tensor.full((1, 1, 2), float(10 * pos + 1)).contiguous().realize()
        out = step(x, Variable("start_pos", 0, 5).bind(pos))
        ref[:, pos] = 10 * pos + 1
        np.testing.assert_array_equal(out.numpy(), ref[:, :pos + 1].sum(1))
    np.testing.assert_array_equal(cache.numpy(), ref)


def test_setitem_in_a_jit_with_a_variable_offset():
    buf = Tensor.zeros(6).contiguous().realize()

    @TinyJit
    def put(v: Tensor, i: Variable) -> None:
        buf.shrink(((i, i + 1),)).assign(v).realize()

    for i in range(6):
        put(Tensor([float(i + 1)]).realize(), Variable("i", 0, 5).bind(i))
    np.testing.assert_array_equal(buf.numpy(), [1, 2, 3, 4, 5, 6])


def test_setitem_through_a_view_tensor():
    a = buffer((3, 3))
    ref = a.numpy().copy()
    t = a.permute(1, 0)
    t[0] = Tensor([7.0, 8.0, 9.0])
    ref.T[0] = [7, 8, 9]
    np.testing.assert_array_equal(t.numpy(), ref.T)
    np.testing.assert_array_equal(a.numpy(), ref)


def test_setitem_with_symbolic_slices_inside_tinyjit():
    buf = Tensor.zeros(2, 5).contiguous().realize()

    @TinyJit
    def put(v: Tensor, i: Variable) -> Tensor:
        buf[:, i:i + 1] = v
        return buf[:, :i + 1].sum(1).realize()

    ref = np.zeros((2, 5), np.float32)
    for i in range(5):
        out = put(Tensor.full((2, 1), float(i + 1)).contiguous().realize(), Variable("i", 0, 4).bind(i))
        ref[:, i] = i + 1
        np.testing.assert_array_equal(out.numpy(), ref[:, :i + 1].sum(1))
    np.testing.assert_array_equal(buf.numpy(), ref)


def test_setitem_writes_only_the_selected_view_of_a_buffer():
    a = buffer((3, 4))
    ref = a.numpy().copy()
    a[1] = 7
    a[:, ::3] = -1
    a[2, 1:3] = Tensor([5.0, 6.0])
    ref[1] = 7
    ref[:, ::3] = -1
    ref[2, 1:3] = [5, 6]
    np.testing.assert_array_equal(a.numpy(), ref)


def test_symbolic_slice_reads():
    a = buffer((2, 6))
    for i in range(1, 6):
        v = Variable("i", 1, 6).bind(i)
        np.testing.assert_array_equal(a[:, :v].sum(1).numpy(), a.numpy()[:, :i].sum(1))
        np.testing.assert_array_equal(a[:, v - 1:v].reshape(2).numpy(), a.numpy()[:, i - 1])


def test_symbolic_span_that_can_reach_past_the_dim():
    # tinygrad 0.9's llama: Variable("start_pos", 1, MAX_CONTEXT) over a cache of MAX_CONTEXT positions, read at
    # (0, start_pos + 1); the span may reach one past the end for the largest value, never for the ones bound
    cache = Tensor.zeros(1, 8, 2).contiguous().realize()
    ref = np.zeros((1, 8, 2), np.float32)
    for pos in (0, 3, 7):
        sp = Variable("start_pos", 0, 8).bind(pos)
        cache.shrink(((0, 1), (sp, sp + 1), (0, 2))).assign(Tensor.full((1, 1, 2), pos + 1.0)).realize()
        ref[:, pos] = pos + 1
        np.testing.assert_array_equal(cache.shrink((None, (0, sp + 1), None)).sum(1).numpy(),
                                      ref[:, :pos + 1].sum(1))
    np.testing.assert_array_equal(cache.numpy(), ref)
    with pytest.raises(AssertionError, match=r"is \(8, 9\) now, out of range"):
        cache.shrink((None, (Variable("start_pos", 0, 8).bind(8), Variable("start_pos", 0, 8).bind(8) + 1), None))


def test_a_jitted_write_past_the_dim_lands_nowhere():
    # the replayed kernel is not re-checked: a value reaching past the view's dim writes nothing and reads zeros,
    # and the rest of the buffer under the view is untouched
    base = Tensor.zeros(10).contiguous().realize()
    view = base.shrink(((0, 8),))

    @TinyJit
    def put(v: Tensor, i: Variable) -> Tensor:
        view.shrink(((i, i + 1),)).assign(v).realize()
        return view.shrink(((i, i + 1),)).contiguous().realize()

    outs = []
    for i in (1, 2, 3, 8):
        outs.append(put(Tensor([float(i + 1)]).realize(), Variable("i", 0, 8).bind(i)).item())
    assert outs == [2.0, 3.0, 4.0, 0.0]
    np.testing.assert_array_equal(base.numpy(), [0, 2, 3, 4, 0, 0, 0, 0, 0, 0])


def test_a_replayed_schedule_writes_each_call_s_own_buffer_and_values():
    # the same graph structure every call: the eager schedule plan replays, on new buffers and new values
    for i in range(5):
        a = buffer((3, 4), start=float(i))
        ref = a.numpy().copy()
        a[1:3, ::2] = Tensor([[float(i), 2.0], [3.0, 4.0]])
        ref[1:3, ::2] = [[i, 2], [3, 4]]
        np.testing.assert_array_equal(a.numpy(), ref)
        b = Tensor.zeros(4, 4).contiguous().realize()
        b.permute(1, 0)[0].assign(Tensor.full((4,), i + 0.25)).realize()
        rb = np.zeros((4, 4), np.float32)
        rb[:, 0] = i + 0.25
        np.testing.assert_array_equal(b.numpy(), rb)
