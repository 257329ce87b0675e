"""Reference vision architectures, written from their papers' and configs' shapes.

Only their tensor shapes matter here (the figures derived from them are parameter
counts and activation bytes), so each is the plain PyTorch form of the published
architecture; the tests of derive_vision.py hold each to its published parameter
count, which catches a wrong layer.
"""

import math

import torch
from torch import nn


class Bottleneck(nn.Module):
    """ResNet v1.5 bottleneck (stride on the 3x3), as torchvision builds it."""

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        out = width * 4
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = (
            nn.Sequential(nn.Conv2d(cin, out, 1, stride, bias=False), nn.BatchNorm2d(out))
            if stride != 1 or cin != out
            else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return self.relu(y + identity)


class ResNet(nn.Module):
    def __init__(self, blocks: tuple[int, int, int, int], classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2, 1),
        )
        layers: list[nn.Module] = []
        cin = 64
        for stage, count in enumerate(blocks):
            width = 64 * 2**stage
            for i in range(count):
                layers.append(Bottleneck(cin, width, 2 if i == 0 and stage > 0 else 1))
                cin = width * 4
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


class EncoderBlock(nn.Module):
    def __init__(self, dim: int, heads: int, mlp: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ln_2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp), nn.GELU(), nn.Linear(mlp, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.ln_1(x)
        x = x + self.attn(y, y, y, need_weights=False)[0]
        return x + self.mlp(self.ln_2(x))


class ViT(nn.Module):
    """ViT-B/16 (Dosovitskiy et al. 2021) with torchvision's layout: class token,
    learned positions, pre-norm blocks, a linear head."""

    def __init__(self, image: int = 224, patch: int = 16, dim: int = 768, depth: int = 12,
                 heads: int = 12, mlp: int = 3072, classes: int = 1000) -> None:  # fmt: skip
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.zeros(1, (image // patch) ** 2 + 1, dim))
        self.blocks = nn.Sequential(*(EncoderBlock(dim, heads, mlp) for _ in range(depth)))
        self.ln = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        return self.head(self.ln(self.blocks(x))[:, 0])


def _conv(cin: int, cout: int, k: int = 1, s: int = 1, p: int | None = None) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, k, s, k // 2 if p is None else p, bias=False),
        nn.BatchNorm2d(cout),
        nn.SiLU(),
    )


class YoloBottleneck(nn.Module):
    def __init__(self, c: int, shortcut: bool) -> None:
        super().__init__()
        self.cv1, self.cv2, self.add = _conv(c, c, 1), _conv(c, c, 3), shortcut

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C3(nn.Module):
    def __init__(self, cin: int, cout: int, n: int, shortcut: bool = True) -> None:
        super().__init__()
        c = cout // 2
        self.cv1, self.cv2, self.cv3 = _conv(cin, c), _conv(cin, c), _conv(2 * c, cout)
        self.m = nn.Sequential(*(YoloBottleneck(c, shortcut) for _ in range(n)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cv3(torch.cat([self.m(self.cv1(x)), self.cv2(x)], 1))


class SPPF(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        c = cin // 2
        self.cv1, self.cv2 = _conv(cin, c), _conv(4 * c, cout)
        self.m = nn.MaxPool2d(5, 1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.cv1(x)
        y1 = self.m(x)
        y2 = self.m(y1)
        return self.cv2(torch.cat([x, y1, y2, self.m(y2)], 1))


class YoloV5(nn.Module):
    """YOLOv5 v6 (Ultralytics yolov5{s,m,l}.yaml): CSP backbone with C3 blocks, SPPF,
    PANet neck, three detection heads of 3 anchors x (80 classes + 5)."""

    def __init__(self, depth: float, width: float, classes: int = 80) -> None:
        super().__init__()

        def ch(c: int) -> int:
            return math.ceil(c * width / 8) * 8

        def n(k: int) -> int:
            return max(round(k * depth), 1)

        self.b0 = _conv(3, ch(64), 6, 2, 2)
        self.b1, self.b2 = _conv(ch(64), ch(128), 3, 2), C3(ch(128), ch(128), n(3))
        self.b3, self.b4 = _conv(ch(128), ch(256), 3, 2), C3(ch(256), ch(256), n(6))
        self.b5, self.b6 = _conv(ch(256), ch(512), 3, 2), C3(ch(512), ch(512), n(9))
        self.b7, self.b8 = _conv(ch(512), ch(1024), 3, 2), C3(ch(1024), ch(1024), n(3))
        self.b9 = SPPF(ch(1024), ch(1024))
        self.h10, self.h13 = _conv(ch(1024), ch(512)), C3(ch(1024), ch(512), n(3), False)
        self.h14, self.h17 = _conv(ch(512), ch(256)), C3(ch(512), ch(256), n(3), False)
        self.h18, self.h20 = _conv(ch(256), ch(256), 3, 2), C3(ch(512), ch(512), n(3), False)
        self.h21, self.h23 = _conv(ch(512), ch(512), 3, 2), C3(ch(1024), ch(1024), n(3), False)
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.no = classes + 5
        self.detect = nn.ModuleList(nn.Conv2d(ch(c), 3 * self.no, 1) for c in (256, 512, 1024))

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        p4 = self.b4(self.b3(self.b2(self.b1(self.b0(x)))))
        p6 = self.b6(self.b5(p4))
        x = self.b9(self.b8(self.b7(p6)))
        h10 = self.h10(x)
        h14 = self.h14(self.h13(torch.cat([self.up(h10), p6], 1)))
        p3 = self.h17(torch.cat([self.up(h14), p4], 1))
        p4_out = self.h20(torch.cat([self.h18(p3), h14], 1))
        p5 = self.h23(torch.cat([self.h21(p4_out), h10], 1))
        outs = []
        for conv, f in zip(self.detect, (p3, p4_out, p5), strict=True):
            y = conv(f)
            b, _, h, w = y.shape
            outs.append(y.view(b, 3, self.no, h, w).permute(0, 1, 3, 4, 2).contiguous())
        return outs
