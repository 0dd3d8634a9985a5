"""Train a small MLP and a small CNN with PyTorch/XLA on pjrt-ref, and check them against torch on the CPU.

    PJRT_DEVICE=PJRT_REF python examples/torch_quickstart.py

Each training step below is traced by PyTorch/XLA into one HLO graph at
`torch_xla.sync()`, handed to pjrt-ref through the PJRT C API (pjrt-ref
converts the HLO to StableHLO with XLA's importer), and run by pjrt-ref's
Python interpreter. The same steps run in eager torch on the CPU; the
losses must agree to float32 rounding.
"""
from __future__ import annotations

import time

import torch
import torch.nn as nn
import torch_xla

DEVICE = torch_xla.device()   # choose the device before the first backward pass
STEPS = 20


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))


def cnn() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(4 * 4 * 4, 3))


def train(make, input_shape, device, sync) -> tuple[list[float], nn.Module]:
    """STEPS steps of SGD with momentum on one fixed batch: the loss of each step, and the model."""
    torch.manual_seed(0)
    model = make().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    data = torch.Generator().manual_seed(1)
    x = torch.randn(16, *input_shape, generator=data).to(device)
    y = torch.randint(0, 3, (16,), generator=data).to(device)
    losses = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        sync()                                   # PyTorch/XLA: compile and run the step's graph
        losses.append(loss.detach())
    return [float(value.cpu()) for value in losses], model


def main() -> None:
    print(f"devices: {torch_xla.devices()}")
    for name, make, shape in (("MLP", mlp, (8,)), ("CNN", cnn, (1, 8, 8))):
        on_cpu, _ = train(make, shape, "cpu", lambda: None)
        start = time.perf_counter()
        on_xla, _ = train(make, shape, DEVICE, torch_xla.sync)
        seconds = time.perf_counter() - start
        print(f"\n{name}, {STEPS} SGD steps ({seconds:.1f} s on {DEVICE}):")
        print(f"{'step':>4} {'torch cpu':>12} {'torch_xla':>12}")
        for step, (a, b) in enumerate(zip(on_cpu, on_xla)):
            print(f"{step:>4} {a:12.6f} {b:12.6f}")
        worst = max(abs(a - b) for a, b in zip(on_cpu, on_xla))
        print(f"largest difference: {worst:.2e}")
        assert worst < 1e-5, f"{name}: losses differ by {worst}"


if __name__ == "__main__":
    main()
