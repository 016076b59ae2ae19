"""Which device a config names, asked without importing torch (``import torch`` alone is ~500 MB
of the dashboard's server): the check the engine's :func:`admm_core.device.resolve_device` makes."""

from __future__ import annotations

import functools
import importlib.util
import subprocess
import sys
from pathlib import Path

from ..errors import DeviceError


def device_name(name: str) -> str:
    """``name`` with ``auto`` resolved ('cuda' when a CUDA device is available, else 'cpu');
    DeviceError for 'cuda' without one."""
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

    In a process that has imported torch (a worker), torch's own answer. Elsewhere (the dashboard's
    server), asked without it: 0 for a torch build without CUDA (no ``libc10_cuda.so`` in its lib/)
    or a machine without the NVIDIA driver; else the driver's own count (``cuInit``,
    ``cuDeviceGetCount``, which honour CUDA_VISIBLE_DEVICES as torch does), from a short
    subprocess so the server does not load libcuda, once per process."""
    real = sys.modules.get("torch")
    if real is not None:
        return real.cuda.device_count() if real.cuda.is_available() else 0
    return _driver_cuda_count()


@functools.cache
def _driver_cuda_count() -> int:
    spec = importlib.util.find_spec("torch")
    libs = [Path(d) / "lib" for d in (spec.submodule_search_locations or [])] if spec else []
    if not any((d / "libc10_cuda.so").exists() for d in libs) or not Path("/proc/driver/nvidia").exists():
        return 0
    try:
        out = subprocess.run([sys.executable, "-c", _CUDA_PROBE], capture_output=True, text=True, timeout=60)
        return int(out.stdout.strip() or 0)
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return 0


_FREE_PROBE = """import ctypes
cu = ctypes.CDLL("libcuda.so.1")
dev, ctx, free, total = ctypes.c_int(0), ctypes.c_void_p(), ctypes.c_size_t(0), ctypes.c_size_t(0)
ok = cu.cuInit(0) == 0 and cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
ok = ok and cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) == 0
ok = ok and cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) == 0
print(free.value if ok else -1)
"""


def cuda_free_bytes() -> int | None:
    """Free memory of CUDA device 0: ``torch.cuda.mem_get_info()`` where torch is imported, else the
    driver's ``cuMemGetInfo`` asked from a short subprocess (None when it cannot say)."""
    real = sys.modules.get("torch")
    if real is not None and real.cuda.is_available():
        return int(real.cuda.mem_get_info()[0])
    try:
        out = subprocess.run([sys.executable, "-c", _FREE_PROBE], capture_output=True, text=True, timeout=60)
        free = int(out.stdout.strip())
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None
    return free if free >= 0 else None
