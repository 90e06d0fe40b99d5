"""Torch layers of the ``cnn`` family (imported only when a network is built)."""

from __future__ import annotations

import torch
from torch import nn


def _conv_bn(in_ch: int, out_ch: int, kernel: int, stride: int = 1, groups: int = 1,
             activation: bool = True) -> nn.Sequential:
    layers: list[nn.Module] = [
        nn.Conv2d(in_ch, out_ch, kernel, stride=stride, padding=kernel // 2, groups=groups,
                  bias=False),
        nn.BatchNorm2d(out_ch),
    ]
    if activation:
        layers.append(nn.ReLU6(inplace=True))
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    """1x1 expand -> depthwise kxk -> linear 1x1 project; adds the input when shapes allow."""

    def __init__(self, in_ch: int, out_ch: int, kernel: int, stride: int,
                 expand_ratio: int) -> None:
        super().__init__()
        hidden = in_ch * expand_ratio
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(_conv_bn(in_ch, hidden, 1))
        layers.append(_conv_bn(hidden, hidden, kernel, stride=stride, groups=hidden))
        # The projection stays linear: a ReLU on the narrow bottleneck would destroy information.
        layers.append(_conv_bn(hidden, out_ch, 1, activation=False))
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and in_ch == out_ch

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.body(x)
        return x + out if self.residual else out


class InvertedResidualNet(nn.Module):
    """Stem -> stages of inverted-residual blocks -> 1x1 head -> global average pool -> linear."""

    def __init__(self, *, in_channels: int, input_size: int, stem_channels: int,
                 stages: list[tuple[int, int]], head_channels: int, kernel_size: int,
                 expand_ratio: int, num_classes: int) -> None:
        super().__init__()
        blocks: list[nn.Module] = [_conv_bn(in_channels, stem_channels, 3)]
        channels, size = stem_channels, input_size
        for index, (out_ch, depth) in enumerate(stages):
            for block in range(depth):
                # Downsample at the start of each later stage, but never below 2x2: on 8x8 inputs a
                # fourth halving would leave a single pixel and nothing for the kernel to see.
                stride = 2 if index > 0 and block == 0 and size > 2 else 1
                blocks.append(InvertedResidual(channels, out_ch, kernel_size, stride,
                                               expand_ratio))
                channels, size = out_ch, size // stride
        blocks.append(_conv_bn(channels, head_channels, 1))
        self.features = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(head_channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = self.pool(self.features(x))
        logits: torch.Tensor = self.classifier(torch.flatten(features, 1))
        return logits
