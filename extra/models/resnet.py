"""ResNet (He et al., 2015) with bottleneck blocks, written with tinygrad.nn layers so that it trains: ResNet-50 is
`ResNet(ResNetConfig())`.

The layout is torchvision's ResNet v1.5 (the stride of a downsampling block sits on its 3x3 convolution, not on
the first 1x1), and the parameters are named as torchvision names them ("layer1.0.conv1.weight",
"layer1.0.downsample.0.weight", "fc.bias"...), so a torchvision state dict loads by name and a PyTorch twin
written with the same attribute names takes this model's weights.

>>> model = ResNet(ResNetConfig(layers=(1, 1, 1, 1), width=4, num_classes=3))
>>> model(Tensor.ones(1, 3, 32, 32)).shape
(1, 3)
"""
from __future__ import annotations

from dataclasses import dataclass

from tinygrad import Tensor
from tinygrad.nn import BatchNorm2d, Conv2d, Linear


@dataclass(frozen=True)
class ResNetConfig:
    """The shape of a bottleneck ResNet; the defaults are ResNet-50 (25.6M parameters). `width` is the first
    stage's inner channel count (64 in the paper); each stage doubles it and a block's output is 4x its width."""
    layers: tuple[int, ...] = (3, 4, 6, 3)
    width: int = 64
    num_classes: int = 1000


EXPANSION = 4


class Bottleneck:
    """1x1 conv down to `width` channels, 3x3 conv (carrying the stride), 1x1 conv up to 4x width; BatchNorm after
    each, ReLU between, and the shortcut added before the last ReLU."""

    def __init__(self, cin: int, width: int, stride: int):
        cout = width * EXPANSION
        self.conv1, self.bn1 = Conv2d(cin, width, 1, bias=False), BatchNorm2d(width)
        self.conv2, self.bn2 = Conv2d(width, width, 3, stride=stride, padding=1, bias=False), BatchNorm2d(width)
        self.conv3, self.bn3 = Conv2d(width, cout, 1, bias=False), BatchNorm2d(cout)
        # the shortcut of a block that changes channels or size: a strided 1x1 conv and a BatchNorm, in a list so
        # that they are named "downsample.0" and "downsample.1" as in torchvision
        self.downsample = [Conv2d(cin, cout, 1, stride=stride, bias=False), BatchNorm2d(cout)] \
            if stride != 1 or cin != cout else []

    def __call__(self, x: Tensor) -> Tensor:
        out = self.bn1(self.conv1(x)).relu()
        out = self.bn2(self.conv2(out)).relu()
        out = self.bn3(self.conv3(out))
        shortcut = x.sequential(self.downsample)
        return (out + shortcut).relu()


class ResNet:
    """Images (N, 3, H, W) -> class logits (N, num_classes): a 7x7 stride-2 stem, a 3x3 stride-2 max pool, four
    stages of bottleneck blocks (stages 2-4 start with stride 2), a global average pool and a linear layer."""

    def __init__(self, cfg: ResNetConfig):
        self.cfg = cfg
        self.conv1 = Conv2d(3, cfg.width, 7, stride=2, padding=3, bias=False)
        self.bn1 = BatchNorm2d(cfg.width)
        cin = cfg.width
        for i, n_blocks in enumerate(cfg.layers):
            width = cfg.width * 2 ** i
            blocks = []
            for j in range(n_blocks):
                blocks.append(Bottleneck(cin, width, 2 if i > 0 and j == 0 else 1))
                cin = width * EXPANSION
            setattr(self, f"layer{i + 1}", blocks)
        self.fc = Linear(cin, cfg.num_classes)

    def stages(self) -> list[list[Bottleneck]]:
        return [getattr(self, f"layer{i + 1}") for i in range(len(self.cfg.layers))]

    def __call__(self, x: Tensor) -> Tensor:
        x = self.bn1(self.conv1(x)).relu().max_pool2d(kernel_size=(3, 3), stride=2, padding=1)
        for stage in self.stages():
            for block in stage:
                x = block(x)
        return self.fc(x.mean(axis=(2, 3)))

    def loss(self, x: Tensor, labels: Tensor) -> Tensor:
        """Mean cross-entropy of the integer `labels` (N,) under the logits of `x`."""
        return self(x).sparse_categorical_crossentropy(labels)


__all__ = ["ResNetConfig", "ResNet", "Bottleneck"]
