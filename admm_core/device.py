"""Where a run computes: the device a config names, CUDA asked without importing torch, and the
machine line recorded beside every timing."""

from __future__ import annotations

import functools
import os
import platform
import subprocess
import sys
from pathlib import Path

from .errors import DeviceError
from .lazy import torch


def resolve_device(name: str) -> torch.device:
    return torch.device(device_name(name))


def device_name(name: str) -> str:
    """``name`` with ``auto`` resolved ('cuda' when a CUDA device is available, else 'cpu');
    DeviceError for 'cuda' without one. The check :func:`resolve_device` makes, without torch."""
    if name == "auto":
        return "cuda" if cuda_device_count() else "cpu"
    if name == "cuda" and not cuda_device_count():
        raise DeviceError("train.device = 'cuda': no CUDA device is available here (use auto or cpu)")
    return name


_CUDA_PROBE = """import ctypes, sys
try:
    cu = ctypes.CDLL("libcuda.so.1")
    n = ctypes.c_int(0)
    ok = cu.cuInit(0) == 0 and cu.cuDeviceGetCount(ctypes.byref(n)) == 0
    print(n.value if ok else 0)
except OSError:
    print(0)
"""


def cuda_device_count() -> int:
    """CUDA devices torch sees here: ``torch.cuda.device_count()`` (0 when none is available).

    Where torch is not imported yet (the dashboard's pages: ``import torch`` alone is ~500 MB of
    the server), asked without it: 0 for a torch build without CUDA (no ``libc10_cuda.so`` in
    its lib/) or a machine without the NVIDIA driver; else the driver's own count (``cuInit``,
    ``cuDeviceGetCount``, which honour CUDA_VISIBLE_DEVICES as torch does), from a short
    subprocess so the server does not load libcuda, once per process."""
    real = sys.modules.get("torch")
    if real is not None:
        return real.cuda.device_count() if real.cuda.is_available() else 0
    return _driver_cuda_count()


@functools.cache
def _driver_cuda_count() -> int:
    import importlib.util

    spec = importlib.util.find_spec("torch")
    libs = [Path(d) / "lib" for d in (spec.submodule_search_locations or [])] if spec else []
    if not any((d / "libc10_cuda.so").exists() for d in libs) or not Path("/proc/driver/nvidia").exists():
        return 0
    try:
        out = subprocess.run([sys.executable, "-c", _CUDA_PROBE], capture_output=True, text=True, timeout=60)
        return int(out.stdout.strip() or 0)
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return 0


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
