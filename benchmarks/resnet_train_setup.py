"""The train-step probes' common setup: torchvision's ResNet-50 (random weights, seed 0) on the GPU in train
mode and a converted copy, a batch of 32 random images with labels, one SGD optimizer per model."""
import copy

import torch
import torchvision

import convtune


def models_and_optimizers(batch: int = 32) -> tuple[dict, dict, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    ref = torchvision.models.resnet50().cuda().train()
    ours = copy.deepcopy(ref)
    convtune.nn.convert(ours)
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    target = torch.randint(0, 1000, (batch,), device="cuda")
    models = {"torch": ref, "convtune": ours}
    return models, {k: torch.optim.SGD(m.parameters(), lr=1e-3) for k, m in models.items()}, x, target
