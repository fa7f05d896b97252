"""torch_models.py — PyTorch definitions of mixprec's model zoo for the peer
benchmarks, layer for layer as src/models builds them (CIFAR variants, 3x3
stride-1 stems, no max pooling): cnn10, resnet18, resnet50 (bottleneck
blocks, expansion 4), mobilenetv2 (plain ReLU, the first two downsampling
strides set to 1) and wrn-28-10 (pre-activation blocks). Convolutions
followed by batch norm have no bias, as in mixprec."""
import torch.nn as nn
import torch.nn.functional as F


def conv_bn(cin, cout, k, stride=1, groups=1):
    return [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]


def conv_bn_relu(cin, cout, k=3, stride=1, groups=1):
    return conv_bn(cin, cout, k, stride, groups) + [nn.ReLU(inplace=True)]


def cnn10(classes=10, cin=3):
    layers, c = [], cin
    for stage, width in enumerate((64, 128, 256)):
        for _ in range(3):
            layers += conv_bn_relu(c, width)
            c = width
        if stage < 2:
            layers.append(nn.AvgPool2d(2))
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, classes))


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin, planes, stride):
        super().__init__()
        self.body = nn.Sequential(*conv_bn_relu(cin, planes, 3, stride), *conv_bn(planes, planes, 3))
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != planes:
            self.shortcut = nn.Sequential(*conv_bn(cin, planes, 1, stride))

    def forward(self, x):
        return F.relu(self.body(x) + self.shortcut(x))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin, planes, stride):
        super().__init__()
        cout = planes * 4
        self.body = nn.Sequential(*conv_bn_relu(cin, planes, 1), *conv_bn_relu(planes, planes, 3, stride),
                                  *conv_bn(planes, cout, 1))
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(*conv_bn(cin, cout, 1, stride))

    def forward(self, x):
        return F.relu(self.body(x) + self.shortcut(x))


def resnet(block, blocks, classes=10, cin=3):
    layers, c = conv_bn_relu(cin, 64), 64
    for i, (planes, n) in enumerate(zip((64, 128, 256, 512), blocks)):
        for j in range(n):
            layers.append(block(c, planes, 2 if (i > 0 and j == 0) else 1))
            c = planes * block.expansion
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, classes))


def resnet18(classes=10, cin=3):
    return resnet(BasicBlock, (2, 2, 2, 2), classes, cin)


def resnet50(classes=10, cin=3):
    return resnet(Bottleneck, (3, 4, 6, 3), classes, cin)


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, expansion, stride):
        super().__init__()
        hidden = cin * expansion
        layers = conv_bn_relu(cin, hidden, 1) if expansion != 1 else []
        layers += conv_bn_relu(hidden, hidden, 3, stride, groups=hidden) + conv_bn(hidden, cout, 1)
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.body(x)
        return y + x if self.residual else y


def mobilenetv2(classes=10, cin=3):
    stages = ((1, 16, 1, 1), (6, 24, 2, 1), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))
    layers, c = conv_bn_relu(cin, 32), 32
    for t, width, n, s in stages:
        for i in range(n):
            layers.append(InvertedResidual(c, width, t, s if i == 0 else 1))
            c = width
    layers += conv_bn_relu(c, 1280, 1)
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1280, classes))


class PreActBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.bn1, self.conv1 = nn.BatchNorm2d(cin), nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn2, self.conv2 = nn.BatchNorm2d(cout), nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Conv2d(cin, cout, 1, stride, bias=False)

    def forward(self, x):
        a = F.relu(self.bn1(x))
        y = self.conv2(F.relu(self.bn2(self.conv1(a))))
        return y + (self.shortcut(a) if self.shortcut is not None else x)


def wide_resnet(depth=28, widen=10, classes=10, cin=3):
    n = (depth - 4) // 6
    layers, c = [nn.Conv2d(cin, 16, 3, 1, 1, bias=False)], 16
    for stage, width in enumerate((16 * widen, 32 * widen, 64 * widen)):
        for i in range(n):
            layers.append(PreActBlock(c, width, 2 if (stage > 0 and i == 0) else 1))
            c = width
    return nn.Sequential(*layers, nn.BatchNorm2d(c), nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(c, classes))


MODELS = {"cnn10": cnn10, "resnet18": resnet18, "resnet50": resnet50, "mobilenetv2": mobilenetv2,
          "wrn": wide_resnet, "wrn-28-10": wide_resnet}
