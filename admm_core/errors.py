"""Errors that name the field and the value. A leaf module: it imports nothing from the package,
so configuration, data, models, methods and DeepFacto all depend on it and never on each other
for their exceptions.
"""

from __future__ import annotations

from typing import Any


class ConfigError(ValueError):
    """A bad configuration value. The message names the field and the value."""


class DataError(FileNotFoundError):
    """A data set is missing or unreadable; the message says where we looked."""


class ImageError(ValueError):
    """An image file or array cannot be used; the message names the file."""


class DeviceError(ConfigError, RuntimeError):
    """The chosen device is not available here (a RuntimeError too, for callers that caught that)."""


class CheckpointError(ValueError):
    """A checkpoint or weights file is damaged or untrusted; the message names the file and why."""


def check(ok: bool, field_name: str, value: Any, why: str) -> None:
    """Raise ConfigError('field = value: why') unless ``ok``."""
    if not ok:
        raise ConfigError(f"{field_name} = {value!r}: {why}")
