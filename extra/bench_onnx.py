"""ONNX models through tinygrad's OnnxRunner beside onnxruntime's CPU execution provider (2 threads).

The ResNet-style CNN and the dynamic-batch MLP of extra/onnx_models.py are exported from PyTorch once; each row
times one inference after warm-up (for tinygrad: the TinyJit capture is made, so the timed calls are replays, with
the input copy and reading the output back included, as onnxruntime's numbers include them too).

Run from the repo root:  PYTHONPATH=. python extra/bench_onnx.py [--rounds 5] [--round-s 0.5]
"""
from __future__ import annotations

import argparse
import os
import sys

# run as a script, this folder comes first on sys.path, where extra/onnx.py (0.9's entry point) would hide the onnx
# package: the repository root takes its place
_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
sys.path.insert(0, os.path.dirname(_here))


def main() -> None:
    import numpy as np
    import onnxruntime as ort

    from extra import onnx_models
    from extra.benchlib import timed
    from tinygrad.nn.onnx import OnnxRunner

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--round-s", type=float, default=0.5)
    args = ap.parse_args()
    workloads = [("CNN 1x3x32x32", onnx_models.resnet_cnn(batch=1, size=32)),
                 ("CNN 8x3x32x32", onnx_models.resnet_cnn(batch=8, size=32)),
                 ("MLP 64x64 (batch dim named)", onnx_models.mlp(batch=64))]
    rows = []
    for name, (data, inputs) in workloads:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads, opts.inter_op_num_threads = 2, 1
        sess = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
        runner = OnnxRunner(data)
        ref = sess.run(None, inputs)[0]
        got = runner(inputs)["out"].numpy()
        np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-4)
        t_ort = timed(lambda sess=sess, inputs=inputs: sess.run(None, inputs), args.round_s, args.rounds)
        t_tg = timed(lambda runner=runner, inputs=inputs: runner(inputs)["out"].numpy(), args.round_s, args.rounds)
        rows.append((name, t_tg, t_ort))
    print(f"{'model':<30} {'tinygrad (JIT)':>15} {'onnxruntime 2t':>15} {'ort / tinygrad':>15}")
    for name, t_tg, t_ort in rows:
        print(f"{name:<30} {t_tg * 1e3:>12.3f} ms {t_ort * 1e3:>12.3f} ms {t_ort / t_tg:>14.2f}x")


if __name__ == "__main__":
    main()
