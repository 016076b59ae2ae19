"""Block-ADMM workbench engine: train deep networks without end-to-end backpropagation.

A network is cut into T blocks, block_t maps Z_{t-1} -> Z_t (Z_0 = X). Training solves

    min_{Θ, Z}  J(Y, Z_T) + Σ_t β_t/2 ‖Z_t − block_t(Z_{t−1}) + U_t‖²

by Stochastic Block-ADMM (batch, paper Alg. 1) or its online variant (Alg. 2).

Notation used everywhere in this package (paper symbol -> code name):

    Θ_t  -> ``params``   parameters of block t
    Z_t  -> ``z``        auxiliary (decoupling) variable after block t, one row per sample
    U_t  -> ``u``        scaled dual of the constraint Z_t = block_t(Z_{t−1})
    β_t  -> ``beta``     penalty of block t (ρ_t = 1/β_t in the paper's convergence section)
    ζ_t  -> ``z_lr``     step size of the Z-update
    η_t  -> ``lr``       step size of the Θ-update
    k    -> ``primal_steps``  Z/Θ passes between two dual steps

Two layers: :mod:`admm_core.spec` declares what a run is (configs, the architecture, data-set and
method records, presets, the memory estimate and preflight) and imports no torch; the rest is the
engine, which imports torch and reads its facts from the spec. The run-file readers
(:mod:`admm_core.rundir`, :mod:`admm_core.status`, :mod:`admm_core.compare`, what tells runs
apart, for the dashboard's Compare page and ``admm compare``, and :mod:`admm_core.runs`, a folder's
runs as rows and their stop and delete, for the Runs page and ``admm runs`` / ``stop`` / ``delete``)
import neither. The package never imports streamlit, and plotting (matplotlib, for the sweep
report's PNG and ``plots.py``) only inside the functions that draw.
"""


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment (plus ``extra``) for a child process that runs this checkout's
    ``admm_core`` (``python -m admm_core …``): the folder holding the package first on PYTHONPATH,
    whatever the child's working directory, then the caller's own PYTHONPATH (a plugin there is
    found by the child too)."""
    import os
    from pathlib import Path

    root = str(Path(__file__).resolve().parent.parent)
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, **extra, "PYTHONPATH": path}


def _version() -> str:
    """pyproject.toml's version, the one place it is written: read from the source tree when the package
    runs from one (a checkout, an editable install, whose metadata goes stale on a bump), else from the
    installed package's metadata."""
    from pathlib import Path

    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    if pyproject.is_file():
        import tomllib

        with open(pyproject, "rb") as f:
            return tomllib.load(f)["project"]["version"]
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("admm-workbench")
    except PackageNotFoundError:
        return "0+unknown"


__version__ = _version()
