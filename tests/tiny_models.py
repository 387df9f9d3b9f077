"""Small models for tune_model.py's tests, importable as tests.tiny_models:<factory> from the project root."""

import torch


def two_shapes() -> torch.nn.Module:
    """Three convolutions of two distinct shapes (the last two alike), small enough for Triton's interpreter."""
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(),
                               torch.nn.Conv2d(4, 4, 3, padding=1), torch.nn.ReLU(),
                               torch.nn.Conv2d(4, 4, 3, padding=1))


def raises() -> torch.nn.Module:
    """A factory that fails as it builds (tune_model.py says so in one line)."""
    raise RuntimeError("no weights here")


def not_a_module() -> dict:
    """A factory that returns something other than a model."""
    return {"conv": torch.nn.Conv2d(3, 4, 3)}


class BasicBlock(torch.nn.Module):
    """torchvision's ResNet BasicBlock (resnet18/34) as it is written there: modules named conv1, bn1, relu, conv2,
    bn2 and an optional downsample Sequential(conv, bn), the residual added before the last ReLU."""

    def __init__(self, inplanes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(planes)
        self.relu = torch.nn.ReLU(inplace=True)
        self.conv2 = torch.nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(planes)
        self.downsample = None if stride == 1 and inplanes == planes else torch.nn.Sequential(
            torch.nn.Conv2d(inplanes, planes, 1, stride, bias=False), torch.nn.BatchNorm2d(planes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(out + identity)


class Bottleneck(torch.nn.Module):
    """torchvision's ResNet Bottleneck (resnet50): 1x1, 3x3 (the stride), 1x1 expanding 4x, each with its batch norm."""

    def __init__(self, inplanes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(planes)
        self.conv2 = torch.nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(planes)
        self.conv3 = torch.nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = torch.nn.BatchNorm2d(planes * 4)
        self.relu = torch.nn.ReLU(inplace=True)
        self.downsample = None if stride == 1 and inplanes == planes * 4 else torch.nn.Sequential(
            torch.nn.Conv2d(inplanes, planes * 4, 1, stride, bias=False), torch.nn.BatchNorm2d(planes * 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(out + identity)


def tiny_resnet() -> torch.nn.Module:
    """A stem (conv, bn, relu), a BasicBlock with a downsample and a Bottleneck, and a conv whose output feeds both a
    batch norm and the residual (not foldable), with non-trivial batch-norm statistics."""
    class Shared(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(16, 16, 1)
            self.bn = torch.nn.BatchNorm2d(16)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.conv(x)
            return self.bn(y) + y

    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1, bias=True), torch.nn.BatchNorm2d(8),
                            torch.nn.ReLU(), BasicBlock(8, 16, stride=2), Bottleneck(16, 4), Shared())
    for bn in m.modules():
        if isinstance(bn, torch.nn.BatchNorm2d):
            n = bn.num_features
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
            bn.weight.data.uniform_(0.5, 1.5)
            bn.bias.data.uniform_(-0.2, 0.2)
            assert n > 0
    return m


def conv_bn_relu() -> torch.nn.Module:
    """Two convolutions, each before a batch norm with non-trivial statistics; a ReLU after the first batch norm
    alone: with fold_bn, one fused call (conv, bn, relu) and one folded call."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1, bias=False), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                            torch.nn.Conv2d(4, 4, 3, padding=1, bias=False), torch.nn.BatchNorm2d(4))
    for bn in (m[1], m[4]):
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
    return m
