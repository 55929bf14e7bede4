"""Train a small CNN on scikit-learn's 8x8 handwritten digits and print its held-out accuracy.

The data (1797 grey 8x8 images of the digits 0-9) ships inside the scikit-learn wheel, so nothing is downloaded.
A fixed, seeded split keeps 360 images for testing. The network is two 3x3 convolutions with batch norm and ReLU,
a 2x2 max pool and a linear classifier (about 10k parameters); each training step (forward, backward, Adam
update) runs under TinyJit, so after the first two steps it replays compiled kernels.

Run: python extra/examples/train_cnn.py [--epochs N] [--seed S]
Prints "test accuracy: 98.61%" last and exits with status 1 below --min-accuracy (97%), so CI can run it.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from tinygrad import Tensor, TinyJit
from tinygrad.nn import BatchNorm2d, Conv2d, Linear
from tinygrad.nn.optim import Adam
from tinygrad.nn.state import get_parameters
from tinygrad.profile import show_compile_progress


def load_data(seed: int, n_test: int = 360) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, y_train, x_test, y_test): images (N, 1, 8, 8) float32 in [0, 1], labels int32."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        sys.exit("train_cnn.py needs scikit-learn for its bundled digits data: pip install scikit-learn")
    digits = load_digits()
    # the pixels are counts 0..16 (4x4 blocks of a 32x32 bitmap)
    x = (digits.images.astype(np.float32) / 16.0)[:, None]
    y = digits.target.astype(np.int32)
    perm = np.random.default_rng(seed).permutation(len(x))
    test, train = perm[:n_test], perm[n_test:]
    return x[train], y[train], x[test], y[test]


class DigitsCNN:
    """conv 3x3 (16) - BN - ReLU - conv 3x3 (32) - BN - ReLU - maxpool 2 - linear (10)."""

    def __init__(self):
        # no conv biases: the batch norm right after subtracts any per-channel constant
        self.conv1, self.bn1 = Conv2d(1, 16, 3, padding=1, bias=False), BatchNorm2d(16)
        self.conv2, self.bn2 = Conv2d(16, 32, 3, padding=1, bias=False), BatchNorm2d(32)
        self.fc = Linear(32 * 4 * 4, 10)

    def __call__(self, x: Tensor) -> Tensor:
        # NOTE: contiguous() makes each activation a kernel's output; left lazy, the batch norm and ReLU fuse into
        # the next convolution's loads and are recomputed for every tap and output channel there (and in its
        # backward), which made a run from a cold kernel cache about twice as long (49 s against 27 s)
        x = self.bn1(self.conv1(x)).relu().contiguous()
        x = self.bn2(self.conv2(x)).relu().contiguous().max_pool2d(2)
        return self.fc(x.flatten(1))


class ProgressBar:
    """One line on stderr, redrawn in place with a carriage return: epoch, step/total, loss, samples/s."""

    def __init__(self, total: int, desc: str, width: int = 24, stream=sys.stderr):
        self.total, self.desc, self.width, self.stream = total, desc, width, stream
        self.start = time.perf_counter()

    def update(self, step: int, loss: float, samples: int) -> None:
        done = self.width * step // self.total
        bar = "#" * done + "." * (self.width - done)
        rate = samples / max(time.perf_counter() - self.start, 1e-9)
        self.stream.write(f"\r{self.desc} [{bar}] {step}/{self.total} loss {loss:.4f} {rate:8.0f} samples/s")
        self.stream.flush()

    def close(self) -> None:
        self.stream.write("\n")
        self.stream.flush()


def evaluate(model: DigitsCNN, x: np.ndarray, y: np.ndarray) -> float:
    """Accuracy in eval mode (batch norm uses its running statistics)."""
    with Tensor.train(False):
        pred = model(Tensor(x)).argmax(axis=1).numpy()
    return float((pred == y).mean())


def train(epochs: int, batch: int, lr: float, seed: int, progress: bool = True) -> tuple[DigitsCNN, float]:
    """Train from scratch; returns the model and its test accuracy."""
    Tensor.manual_seed(seed)
    x_train, y_train, x_test, y_test = load_data(seed)
    model = DigitsCNN()
    # all of the model's tensors: the optimizer updates the trainable ones and realizes the batch-norm statistics
    opt = Adam(get_parameters(model), lr=lr)

    @TinyJit
    def step(x: Tensor, y: Tensor) -> Tensor:
        opt.zero_grad()
        loss = model(x).sparse_categorical_crossentropy(y)
        loss.backward()
        opt.step()
        return loss.realize()

    rng = np.random.default_rng(seed + 1)
    # whole batches only: a jitted step replays one fixed shape (the few left-over images change every epoch)
    steps = len(x_train) // batch
    with Tensor.train():
        for epoch in range(epochs):
            bar = ProgressBar(steps, f"epoch {epoch + 1}/{epochs}") if progress else None
            perm = rng.permutation(len(x_train))
            for i in range(steps):
                idx = perm[i * batch:(i + 1) * batch]
                loss = step(Tensor(x_train[idx]), Tensor(y_train[idx])).item()
                if bar:
                    bar.update(i + 1, loss, (i + 1) * batch)
            if bar:
                bar.close()
    return model, evaluate(model, x_test, y_test)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--min-accuracy", type=float, default=0.97, help="exit with status 1 below this")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args()
    if not args.quiet:
        show_compile_progress(2.0)  # a cold start compiles for a while: say so once it takes over 2 s
    if args.epochs < 1 or args.batch < 2:
        parser.error("--epochs must be >= 1 and --batch >= 2 (batch norm needs 2 images)")
    st = time.perf_counter()
    _, acc = train(args.epochs, args.batch, args.lr, args.seed, progress=not args.quiet)
    print(f"trained {args.epochs} epochs in {time.perf_counter() - st:.1f} s")
    print(f"test accuracy: {acc * 100:.2f}%")
    if acc < args.min_accuracy:
        print(f"below the required {args.min_accuracy * 100:.2f}%", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
