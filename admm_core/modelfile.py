"""A network named on the command line as ``path/to/file.py:Name`` (the ``module:object`` habit of
uvicorn and gunicorn): ``Name`` is an ``nn.Module`` class or a function returning one, called with
no arguments.

The file is imported by path (it runs, as a script the user wrote does; nothing is unpickled). A
run records the file's absolute path, ``Name`` and the SHA-256 of its bytes in model.json
(``source``); resuming or evaluating the run imports the same file again and is refused when its
bytes changed since, because the checkpoint's Θ would then meet a different network.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from torch import nn

from .errors import ConfigError
from .spec.archs import file_sha256, model_file_problem, split_model_spec


def parse(spec: str, field: str = "--model") -> tuple[Path, str]:
    """``"dir/file.py:Name"`` -> (the file's absolute path, Name), checked."""
    parts = split_model_spec(spec)
    if parts is None:
        raise ConfigError(f"{field} {spec!r}: give FILE.py:Name (an nn.Module class or a function returning one)")
    path, name = parts
    p = Path(path).expanduser().resolve()
    if p.suffix != ".py" or not p.is_file():
        raise ConfigError(f"{field} {spec!r}: {str(p)!r} is not a Python file")
    return p, name


def load(spec: str, field: str = "--model") -> tuple[nn.Module, dict]:
    """The module ``spec`` names, built, and its source record {file, name, sha256} for model.json."""
    path, name = parse(spec, field)
    digest = file_sha256(path)
    module_name = f"admm_model_{digest[:16]}"
    loader = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(loader)
    sys.modules[module_name] = module  # dataclasses and pickling-free helpers look classes up here
    try:
        loader.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 - a user's file can fail in any way; said in one line
        sys.modules.pop(module_name, None)
        raise ConfigError(f"{field} {spec!r}: importing {path.name} failed ({type(e).__name__}: {e})") from None
    obj = getattr(module, name, None)
    if obj is None:
        found = sorted(k for k, v in vars(module).items() if _is_candidate(v, module_name))
        raise ConfigError(f"{field} {spec!r}: {path.name} has no {name!r} (found: {', '.join(found) or 'none'})")
    if not callable(obj):
        raise ConfigError(f"{field} {spec!r}: {name!r} is a {type(obj).__name__}, not a class or a function")
    try:
        model = obj()
    except Exception as e:  # noqa: BLE001
        raise ConfigError(f"{field} {spec!r}: {name}() failed ({type(e).__name__}: {e})") from None
    if not isinstance(model, nn.Module):
        raise ConfigError(f"{field} {spec!r}: {name}() returned a {type(model).__name__}, not a torch.nn.Module")
    return model, {"file": str(path), "name": name, "sha256": digest}


def _is_candidate(v, module_name: str) -> bool:
    """A class or function defined in the file itself (not imported into it)."""
    return callable(v) and getattr(v, "__module__", None) == module_name


def reload(source: dict, field: str) -> nn.Module:
    """The network of a run's ``source`` record, refused (naming the file) when it changed since."""
    if why := model_file_problem(source):
        raise ConfigError(f"{field}: {why}")
    model, _ = load(f"{source['file']}:{source.get('name')}", field)
    return model
