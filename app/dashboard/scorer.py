"""The Heatmaps page's scorer: DeepFacto's network runs in a process of its own.

Score maps need torch and a loaded model (about 800 MB resident), which would stay in the server
for good once anybody opened Heatmaps (docs/reliability.md). So the page asks a child process
(``python -m admm_core.heatmaps serve``: one JSON line each way, arrays through files in a private
temporary folder, read without pickle), started on the first request and ended after :data:`IDLE_S`
idle seconds. The folder goes with the process (or with a later server, once its server pid is
gone). A failed request raises the engine's own exception; a process that died or hung is started
afresh on the next request.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from admm_core import child_env
from admm_core.errors import CheckpointError, ConfigError, DataError, ImageError
from admm_core.status import pid_alive

ROOT = Path(__file__).resolve().parents[2]
IDLE_S = 600.0  # an unused scorer ends after this long (its memory goes back)
TIMEOUT_S = 300.0  # one request at most (the first loads torch and the model)
ERRORS = {
    e.__name__: e
    for e in (CheckpointError, ConfigError, DataError, ImageError, FileNotFoundError, ValueError, KeyError, OSError)
}


class Scorer:
    """A client of one scorer process; thread-safe (Streamlit's sessions are threads)."""

    def __init__(self, idle_s: float = IDLE_S, timeout_s: float = TIMEOUT_S):
        self.idle_s, self.timeout_s = idle_s, timeout_s
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._dir: Path | None = None
        self._last = 0.0

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def _start(self) -> None:
        _remove_orphans()
        self._dir = Path(tempfile.mkdtemp(prefix=f"admm-scorer-{os.getpid()}-"))
        with open(self._dir / "stderr.txt", "wb") as err:  # the child keeps its own descriptor
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "admm_core.heatmaps", "serve", str(self._dir)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                cwd=ROOT,
                env=child_env(),
                text=True,
            )
        threading.Thread(target=self._reap_when_idle, args=(self._proc,), daemon=True).start()

    def _reap_when_idle(self, proc: subprocess.Popen) -> None:
        while proc.poll() is None:
            time.sleep(min(30.0, self.idle_s / 2))
            with self._lock:
                if self._proc is proc and time.monotonic() - self._last > self.idle_s:
                    self._close()

    def _close(self) -> None:
        if self._proc is not None:
            try:
                self._proc.stdin.close()  # its loop ends at the end of stdin
                self._proc.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait()
            for pipe in (self._proc.stdin, self._proc.stdout):
                try:
                    pipe.close()
                except OSError:  # a dead process's stdin may refuse the flush
                    pass
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
        self._proc, self._dir = None, None

    def close(self) -> None:
        with self._lock:
            self._close()

    def _running(self) -> Path:
        """A live scorer's folder (started afresh if there is none, or it died)."""
        if self._proc is None or self._proc.poll() is not None:
            self._close()
            self._start()
        return self._dir

    def _ask(self, req: dict) -> dict:
        self._running()
        self._last = time.monotonic()
        timed_out = False
        try:
            self._proc.stdin.write(json.dumps(req) + "\n")
            self._proc.stdin.flush()
            ready, _, _ = select.select([self._proc.stdout], [], [], self.timeout_s)
            timed_out = not ready
            line = self._proc.stdout.readline() if ready else ""
        except OSError:  # its stdin closed: it ended
            line = ""
        self._last = time.monotonic()
        if not line:  # it died, or hung past the timeout: say why, start afresh next time
            tail = (self._dir / "stderr.txt").read_text(errors="replace")[-600:] if self._dir else ""
            self._close()
            why = f"the scorer process {'hung' if timed_out else 'ended'} without an answer"
            raise (RuntimeError if timed_out else _Ended)(why + (f": {tail.strip()}" if tail else ""))
        reply = json.loads(line)
        if "error" in reply:
            raise ERRORS.get(reply.get("type"), RuntimeError)(reply["error"])
        return reply

    def _twice(self, ask):
        """``ask()``, once more in a new process if the scorer ended without answering (not if it hung)."""
        try:
            return ask()
        except _Ended:
            return ask()

    def info(self, ref: str) -> tuple[int, list[int]]:
        """(rank r, the components by mean score over the training faces, most used first) of a model."""
        with self._lock:
            reply = self._twice(lambda: self._ask({"op": "info", "ref": str(ref)}))
        return int(reply["rank"]), [int(k) for k in reply["order"]]

    def maps(self, ref: str, face: np.ndarray, components: list[int]) -> tuple[np.ndarray, list[np.ndarray]]:
        """(the face as the model crops it, one (H, W) map in [0, 1] per component): what
        :func:`admm_core.heatmaps.crop_image` and :func:`~admm_core.heatmaps.heatmaps` return."""

        def ask():
            folder = self._running()  # a new process has a new folder: the face is written there
            face_path, out_path = folder / "face.npy", folder / "maps.npz"
            np.save(face_path, np.ascontiguousarray(face, dtype=np.uint8), allow_pickle=False)
            req = {"op": "maps", "ref": str(ref), "face": str(face_path), "components": [int(k) for k in components]}
            self._ask({**req, "out": str(out_path)})
            with np.load(out_path, allow_pickle=False) as z:
                return z["crop"], list(z["maps"])

        with self._lock:
            return self._twice(ask)


class _Ended(RuntimeError):
    """The scorer process ended without an answer."""


def _remove_orphans() -> None:
    """Remove ``admm-scorer-<pid>-*`` folders whose server is gone (killed with its scorer at once)."""
    for d in Path(tempfile.gettempdir()).glob("admm-scorer-*-*"):
        pid = d.name.split("-")[2]
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            shutil.rmtree(d, ignore_errors=True)


_SCORER: Scorer | None = None
_SCORER_LOCK = threading.Lock()


def scorer() -> Scorer:  # the server's one
    global _SCORER
    with _SCORER_LOCK:
        if _SCORER is None:
            _SCORER = Scorer()
        return _SCORER
