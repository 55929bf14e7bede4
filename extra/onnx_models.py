"""Small real models exported from PyTorch to ONNX (the legacy TorchScript exporter, which works offline), for the
ONNX tests and extra/bench_onnx.py: a ResNet-style CNN, a BERT-style encoder block and an MLP whose batch dim is
named (dynamic). Each builder returns (onnx bytes, example inputs as numpy arrays); weights come from a fixed seed.
"""
from __future__ import annotations

import io
import math
import warnings

import numpy as np


def _export(model, args: tuple, names: list[str], dynamic: dict | None = None, opset: int = 17) -> bytes:
    import torch
    f = io.BytesIO()
    model.eval()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, args, f, input_names=names, output_names=["out"], dynamic_axes=dynamic,
                          opset_version=opset, dynamo=False)
    return f.getvalue()


def resnet_cnn(batch: int = 1, size: int = 32) -> tuple[bytes, dict[str, np.ndarray]]:
    """Conv-BN-ReLU stem, max pool, two residual blocks (one strided with a 1x1 projection), global pool, Linear."""
    import torch
    from torch import nn
    torch.manual_seed(0)

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int):
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
            self.c2, self.b2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
            self.proj = None if stride == 1 and cin == cout else \
                nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            y = self.b2(self.c2(torch.relu(self.b1(self.c1(x)))))
            return torch.relu(y + (x if self.proj is None else self.proj(x)))

    model = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                          nn.MaxPool2d(2), Block(16, 16, 1), Block(16, 32, 2),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
    # running statistics that are not the identity, so BatchNormalization is really tested
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    x = np.random.default_rng(0).standard_normal((batch, 3, size, size)).astype(np.float32)
    return _export(model, (torch.from_numpy(x),), ["x"]), {"x": x}


def bert_block(batch: int = 2, seq: int = 16, dim: int = 64, heads: int = 4) -> tuple[bytes, dict[str, np.ndarray]]:
    """One post-norm BERT encoder layer with exact (erf) GELU and an additive attention mask input."""
    import torch
    from torch import nn
    torch.manual_seed(0)

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))
            self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
            self.up, self.down = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

        def split(self, t):
            b, s, _ = t.shape
            return t.reshape(b, s, heads, dim // heads).transpose(1, 2)

        def forward(self, x, mask):
            q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
            att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(dim // heads) + mask, dim=-1)
            ctx = (att @ v).transpose(1, 2).reshape(x.shape)
            h = self.ln1(x + self.o(ctx))
            return self.ln2(h + self.down(nn.functional.gelu(self.up(h))))

    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, seq, dim)).astype(np.float32)
    mask = np.zeros((batch, 1, 1, seq), np.float32)
    mask[:, :, :, seq - 3:] = -10000.0  # the last tokens are padding
    return _export(Layer(), (torch.from_numpy(x), torch.from_numpy(mask)), ["x", "mask"]), {"x": x, "mask": mask}


def mlp(batch: int = 8, din: int = 64, hidden: int = 256, dout: int = 10) -> tuple[bytes, dict[str, np.ndarray]]:
    """Linear-ReLU-Linear-ReLU-Linear with log-softmax, exported with a named ('batch') first input dim."""
    import torch
    from torch import nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(din, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                          nn.Linear(hidden, dout), nn.LogSoftmax(-1))
    x = np.random.default_rng(0).standard_normal((batch, din)).astype(np.float32)
    data = _export(model, (torch.from_numpy(x),), ["x"], dynamic={"x": {0: "batch"}, "out": {0: "batch"}})
    return data, {"x": x}


def ort_run(data: bytes, inputs: dict[str, np.ndarray], threads: int = 2) -> np.ndarray:
    """The model's first output from onnxruntime's CPU execution provider."""
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    sess = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
    return sess.run(None, inputs)[0]
