"""bench/resnet9_torch.py — PyTorch's ResNet9 for the benchmarks' reference sides, the mirror of
examples/resnet9_model.h: base width w (16 on the CPU benchmarks, 64 on bench/gpu_train)."""
import torch.nn as nn


def conv_bn(cin, cout, pool=False):
    layers = [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]
    if pool:
        layers.append(nn.MaxPool2d(2))
    return nn.Sequential(*layers)


class Residual(nn.Sequential):
    def forward(self, x):
        return x + super().forward(x)


def resnet9(w):
    return nn.Sequential(
        conv_bn(3, w), conv_bn(w, 2 * w, True),
        Residual(conv_bn(2 * w, 2 * w), conv_bn(2 * w, 2 * w)),
        conv_bn(2 * w, 4 * w, True), conv_bn(4 * w, 8 * w, True),
        Residual(conv_bn(8 * w, 8 * w), conv_bn(8 * w, 8 * w)), nn.MaxPool2d(4), nn.Flatten(),
        nn.Dropout(0.2), nn.Linear(8 * w, 10))
