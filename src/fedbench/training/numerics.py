"""``engine.precision`` and ``engine.memory_format``: how every forward pass of a run computes.

- ``fp32`` (default): float32 throughout; on CUDA, TF32 is switched off for matmuls and convolutions.
- ``tf32`` (CUDA): float32 storage, TF32 tensor-core matmuls and convolutions.
- ``bf16-mixed``: forward passes under ``torch.autocast(bfloat16)`` (matmuls and convolutions in bf16, losses and
  reductions in fp32); parameters, gradients, optimizer and server state stay float32.
- ``channels_last``: 4-D inputs of convolutions are restrided to NHWC before the convolution (a copy of the batch),
  which oneDNN's CPU convolutions run faster; parameters keep their layout, so flat vectors are unchanged.
  ``auto`` = channels_last for models with a ``Conv2d`` on CPU, and on CUDA under bf16-mixed.

Every forward pass goes through ``Numerics.autocast()`` (the local steps, the algorithms' extra gradients, the
cohort runner, evaluation); the restriding is a forward pre-hook on each ``Conv2d``, so it applies everywhere too.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch
from torch import nn


class Numerics:
    def __init__(self, device: torch.device, precision: str = "fp32", memory_format: str = "contiguous"):
        self.device_type = device.type
        self.precision = precision
        self.memory_format = memory_format

    def autocast(self):
        if self.precision == "bf16-mixed":
            return torch.autocast(self.device_type, dtype=torch.bfloat16)
        return nullcontext()

    def apply(self, model: nn.Module) -> "Numerics":
        """Resolve ``auto``, install the channels-last hooks on ``model`` and set the process's TF32 switches."""
        convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
        if self.memory_format == "auto":
            wanted = bool(convs) and (self.device_type == "cpu" or self.precision == "bf16-mixed")
            self.memory_format = "channels_last" if wanted else "contiguous"
        if self.memory_format == "channels_last":
            for conv in convs:
                conv.register_forward_pre_hook(_nhwc)
        if self.device_type == "cuda":
            tf32 = self.precision == "tf32"
            torch.backends.cuda.matmul.allow_tf32 = tf32
            torch.backends.cudnn.allow_tf32 = tf32
        return self


def _nhwc(module: nn.Module, args: tuple):
    """Forward pre-hook: a 4-D input that is not NHWC-strided is copied into NHWC (a 1-channel batch gathered from
    the dataset is both contiguous and 'channels_last' by torch's test, yet not NHWC for oneDNN: stride(1) says).
    Inputs inside torch.func transforms (the cohort runner's vmap(grad)) are left alone: their logical 4-D view
    wraps a 5-D batch."""
    x = args[0]
    if not torch._C._functorch.is_functorch_wrapped_tensor(x) and x.dim() == 4 and x.stride(1) != 1:
        return (torch.empty_like(x, memory_format=torch.channels_last).copy_(x),) + tuple(args[1:])
    return None
