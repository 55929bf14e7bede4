"""ONNX models through tinygrad's OnnxRunner beside onnxruntime's CPU execution provider (2 threads).

The ResNet-style CNN, the BERT-style block and the dynamic-batch MLP of extra/onnx_models.py are exported from
PyTorch once; each row times one inference after warm-up (for tinygrad: the TinyJit capture is made, so the timed
calls are replays, with the input copy and reading the output back included, as onnxruntime's numbers include them
too). The two run in alternating rounds (A/B in the same run, so a busy spell of a shared machine hits both); a row
gives the median and the best of the rounds' mean times, and the ratio of the medians.

Threads: onnxruntime gets 2 intra-op threads; tinygrad splits a large CLANG kernel over OpenMP's threads (all cores
unless OMP_NUM_THREADS says otherwise; TG_HOST_POOL=1 puts them on tinygrad's own pool, see docs/threads.md). Neither
pool spins between parallel regions here (onnxruntime's allow_spinning=0, OMP_WAIT_POLICY=PASSIVE unless set): on 2
cores shared with other jobs, a spinning worker holds a core the other side or the caller needs. With libgomp's
default (spinning) policy at a load average of 28, the CNN 8x3x32x32 took 17 ms a call, 2.6 ms with PASSIVE.

Run from the repo root:  PYTHONPATH=. python extra/bench_onnx.py [--rounds 7] [--round-s 0.3]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

# run as a script, this folder comes first on sys.path, where extra/onnx.py (0.9's entry point) would hide the onnx
# package: the repository root takes its place
_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
sys.path.insert(0, os.path.dirname(_here))


def main() -> None:
    # before anything loads libgomp, which reads it once (see the module docstring)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import numpy as np
    import onnxruntime as ort

    from extra import onnx_models
    from extra.benchlib import median, reps_for
    from tinygrad.nn.onnx import OnnxRunner

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--round-s", type=float, default=0.3)
    args = ap.parse_args()
    workloads = [("CNN 1x3x32x32", onnx_models.resnet_cnn(batch=1, size=32)),
                 ("CNN 8x3x32x32", onnx_models.resnet_cnn(batch=8, size=32)),
                 ("BERT block 2x16x64", onnx_models.bert_block(batch=2, seq=16, dim=64)),
                 ("MLP 64x64 (batch dim named)", onnx_models.mlp(batch=64))]
    rows = []
    for name, (data, inputs) in workloads:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads, opts.inter_op_num_threads = 2, 1
        # its workers would otherwise spin on after each run, holding the cores through tinygrad's next round
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        sess = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
        runner = OnnxRunner(data)
        ref = sess.run(None, inputs)[0]
        got = runner(inputs)["out"].numpy()
        np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-4)
        fns = {"tg": lambda runner=runner, inputs=inputs: runner(inputs)["out"].numpy(),
               "ort": lambda sess=sess, inputs=inputs: sess.run(None, inputs)}
        reps = {k: reps_for(f, args.round_s) for k, f in fns.items()}  # also the warm-up (and TinyJit's capture)
        times: dict[str, list[float]] = {k: [] for k in fns}
        for _ in range(args.rounds):
            for k, f in fns.items():
                start = time.perf_counter()
                for _ in range(reps[k]):
                    f()
                times[k].append((time.perf_counter() - start) / reps[k])
        rows.append((name, times["tg"], times["ort"]))
    print(f"{'model':<30} {'tinygrad (JIT) median/best':>27} {'onnxruntime 2t median/best':>27} {'ort / tinygrad':>15}")
    for name, t_tg, t_ort in rows:
        print(f"{name:<30} {median(t_tg) * 1e3:>10.3f} /{min(t_tg) * 1e3:>8.3f} ms "
              f"{median(t_ort) * 1e3:>10.3f} /{min(t_ort) * 1e3:>8.3f} ms {median(t_ort) / median(t_tg):>14.2f}x")


if __name__ == "__main__":
    main()
