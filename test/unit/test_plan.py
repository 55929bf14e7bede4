"""Schedule plans: graphs of a structure seen before replay its cached schedule, with the same results as scheduling
them afresh (numpy is the oracle), and never when something the schedule depends on differs."""
import math

import numpy as np
import pytest

from tinygrad import Tensor
from tinygrad.engine import plan
from tinygrad.helpers import Context, GlobalCounters


def hits_after(fn, times=3):
    """(graphs served by a plan, plans made) while calling fn `times` times."""
    h0, m0, _ = plan.plan_stats()
    for _ in range(times):
        fn()
    h1, m1, _ = plan.plan_stats()
    return h1 - h0, m1 - m0


def test_repeated_graph_is_planned_once_and_stays_right():
    x = Tensor(np.arange(8, dtype=np.float32)).realize()
    outs = []
    hits, misses = hits_after(lambda: outs.append((x * 2 + 1).realize().numpy()), 4)
    assert misses <= 1 and hits >= 3
    for o in outs:
        np.testing.assert_array_equal(o, np.arange(8, dtype=np.float32) * 2 + 1)


def test_new_inputs_same_structure():
    # the plan names buffers by position, so other tensors of the same shape get their own results
    for k in range(4):
        a = Tensor(np.full(5, k, np.float32)).realize()
        b = Tensor(np.full(5, 10 * k, np.float32)).realize()
        np.testing.assert_array_equal((a * b + a).numpy(), np.full(5, k * 10 * k + k, np.float32))


def test_shared_inputs_are_part_of_the_structure():
    a = Tensor([1.0, 2.0, 3.0]).realize()
    b = Tensor([10.0, 20.0, 30.0]).realize()
    np.testing.assert_array_equal((a * b).numpy(), [10, 40, 90])
    np.testing.assert_array_equal((a * a).numpy(), [1, 4, 9])
    np.testing.assert_array_equal((b * a).numpy(), [10, 40, 90])
    np.testing.assert_array_equal((b * b).numpy(), [100, 400, 900])


@pytest.mark.parametrize("c", [0.0, -0.0, 2.0, -2.0, math.inf])
def test_constants_are_part_of_the_structure(c):
    x = Tensor([1.0, -1.0]).realize()
    for _ in range(2):
        got = (1 / (x * c)).numpy()
        with np.errstate(all="ignore"):
            want = 1 / (np.array([1.0, -1.0], np.float32) * np.float32(c))
        np.testing.assert_array_equal(got, want)


def test_in_place_updates_replay_correctly():
    w = Tensor(np.ones(6, np.float32)).contiguous().realize()
    for _ in range(5):
        w.assign(w * 2 - 1).realize()
    np.testing.assert_array_equal(w.numpy(), np.ones(6, np.float32))
    v = Tensor(np.arange(6, dtype=np.float32)).contiguous().realize()
    for _ in range(3):
        v.assign(v + 1).realize()
    np.testing.assert_array_equal(v.numpy(), np.arange(6, dtype=np.float32) + 3)


def test_in_place_update_reading_shifted_values():
    w = Tensor(np.arange(4, dtype=np.float32)).contiguous().realize()
    ref = np.arange(4, dtype=np.float32)
    for _ in range(3):
        w.assign(w.flip(0) + w).realize()
        ref = ref[::-1] + ref
    np.testing.assert_array_equal(w.numpy(), ref)


def test_multi_kernel_graph_and_several_outputs():
    x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4)).realize()
    for _ in range(3):
        s = x.softmax(1)
        m = (x * 3).sum(0)
        Tensor.corealize([s, m])
        e = np.exp(np.arange(12, dtype=np.float32).reshape(3, 4) - np.arange(12).reshape(3, 4).max(1, keepdims=True))
        np.testing.assert_allclose(s.numpy(), e / e.sum(1, keepdims=True), rtol=1e-6)
        np.testing.assert_array_equal(m.numpy(), (np.arange(12, dtype=np.float32).reshape(3, 4) * 3).sum(0))


def test_kernel_count_matches_the_schedule():
    x = Tensor(np.ones(16, np.float32)).realize()
    (x.exp() + 1).realize()
    before = GlobalCounters.kernel_count
    (x.exp() + 1).realize()
    assert GlobalCounters.kernel_count - before == 1


def test_debug_runs_the_printing_path(capsys):
    x = Tensor([1.0, 2.0]).realize()
    (x + 5).realize()
    with Context(DEBUG=2):
        np.testing.assert_array_equal((x + 5).numpy(), [6, 7])
    assert "E_2" in capsys.readouterr().out


def test_clear_plans():
    x = Tensor([1.0, 2.0]).realize()
    (x - 3).realize()
    plan.clear_plans()
    h, m = hits_after(lambda: (x - 3).realize(), 1)
    assert (h, m) == (0, 1)
