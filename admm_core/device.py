"""Where a run computes: the torch device a config names (the check itself is
:func:`admm_core.spec.device.device_name`'s) and the machine line recorded beside every timing."""

from __future__ import annotations

import os
import platform

import torch

from .spec.device import device_name


def resolve_device(name: str) -> torch.device:
    return torch.device(device_name(name))


def machine(device="cpu") -> str:
    """What a timing was measured on: CPU model, cores, the accelerator or the torch thread count
    (for ``device``, a run's device), torch version. Runs record it in ``status.json``."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    on_gpu = str(device).startswith("cuda") and torch.cuda.is_available()
    dev = torch.cuda.get_device_name(device) if on_gpu else f"CPU only, {torch.get_num_threads()} threads"
    return f"{cpu}; {os.cpu_count()} cores; {dev}; torch {torch.__version__}"
