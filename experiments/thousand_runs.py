"""A thousand runs: how the dashboard's listings hold up (issue #36).

Makes a runs folder with ``--finished`` finished runs (copies of three small digits runs, each
with its own id, so no training is repeated) and ``--live`` live ones (real workers training
long digits runs), then renders the Runs page, the Compare page and the Train page (its run
menu) under Streamlit's AppTest (the server's script run, in this process) and measures:

- first render: a new session's first run of the page (s);
- refresh: a rerun of the same session, what each auto-refresh costs the server (s), the median
  of ``--repeats``; and the listing alone (``ui.list_runs``, what the live fragments call);
- memory: this process's resident set after all pages (MB), i.e. the server's.

With ``--markdown FILE`` the table replaces the block between ``<!-- thousand-runs -->`` and
``<!-- /thousand-runs -->`` in FILE (docs/reliability.md), with the machine and load named.

    python experiments/thousand_runs.py --markdown docs/reliability.md
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

TARGETS = {"first": 2.0, "refresh": 0.3, "rss_mb": 500.0}


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS:")) / 1024


def make_runs(root: Path, finished: int, live: int) -> list[Path]:
    """``finished`` copies of three finished runs (distinct ids) and ``live`` live workers; returns the live ones."""
    from admm_core.presets import preset_config
    from admm_core.runs import write_json
    from app.dashboard import workers as W

    seeds = []
    for method in ("block-admm", "adam", "sgd"):  # trained by the CLI: this process stays a server's size
        d = root / "_seed" / method
        args = ["--preset", "digits-mlp", "--method", method, "--epochs", "3", "--train-limit", "200"]
        args += ["--test-limit", "100", "--out", str(d), "--quiet"]
        subprocess.run([sys.executable, "-m", "admm_core", "train", *args], cwd=ROOT, check=True)
        seeds.append(d)
    for i in range(finished):
        src = seeds[i % len(seeds)]
        dst = root / f"20260101-{i // 60:04d}{i % 60:02d}-digits-mlp-{src.name}-s{i}"
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("run.lock", "heartbeat"))
        st = json.loads((dst / "status.json").read_text())
        write_json(dst / "status.json", {**st, "updated": st["updated"] - (finished - i)}, durable=False)
        os.utime(dst, (time.time() - (finished - i), time.time() - (finished - i)))
    shutil.rmtree(root / "_seed")
    lives = []
    for i in range(live):
        cfg = preset_config("digits-mlp", "sgd").replace(
            train__epochs=100000, data__train_limit=200, data__test_limit=100, train__seed=1000 + i
        )
        lives.append(W.start_run(cfg, root))
    return lives


def measure(root: Path, repeats: int) -> tuple[list[dict], float]:
    """(rows, cold start s): per page the first render of a new session on a warm server, a full
    rerun (what an interaction costs) and the auto-refresh fragment alone (what every poll costs)."""
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    from app import ui

    os.environ["ADMM_RUNS"] = str(root)
    spent: dict[str, list[float]] = {}
    real_fragment = st.fragment

    def timed_fragment(func=None, **kw):  # st.fragment with each call of the fragment body timed
        def wrap(f):
            def body(*a, **k):
                t = time.perf_counter()
                try:
                    return f(*a, **k)
                finally:
                    spent.setdefault(f.__name__, []).append(time.perf_counter() - t)

            body.__name__ = body.__qualname__ = f.__name__
            return real_fragment(body, **kw)

        return wrap(func) if func is not None else wrap

    st.fragment = timed_fragment
    t = time.perf_counter()
    AppTest.from_file(str(ROOT / "app" / "main.py"), default_timeout=120).run()  # a server's first page
    cold = time.perf_counter() - t
    rows = []
    pages = (("Runs", "views/runs.py", "runs_panel"), ("Compare", "views/compare.py", None))
    for page, path, frag in (*pages, ("Train (run menu)", None, "live_panel")):
        at = AppTest.from_file(str(ROOT / "app" / "main.py"), default_timeout=120)
        t = time.perf_counter()
        at.run()  # a new session opens on Train (the default page)
        if path:  # then the page itself, first time in this session
            t = time.perf_counter()
            at.switch_page(path).run()
        first = time.perf_counter() - t
        assert not at.exception, [e.value for e in at.exception]
        spent.clear()
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            at.run()
            times.append(time.perf_counter() - t)
        poll = statistics.median(spent[frag]) if frag and spent.get(frag) else None
        rows.append({"page": page, "first": first, "rerun": statistics.median(times), "refresh": poll})
    st.fragment = real_fragment
    lst = []
    for _ in range(repeats):
        t = time.perf_counter()
        n = len(ui.list_runs())
        lst.append(time.perf_counter() - t)
    rows.append(
        {
            "page": f"listing alone (`ui.list_runs`, {n} runs)",
            "first": None,
            "rerun": None,
            "refresh": statistics.median(lst),
        }
    )
    return rows, cold


def machine_line() -> str:
    from admm_core.runs import machine

    load = open("/proc/loadavg").read().split()[:3]
    return f"{machine('cpu')}; load average {' '.join(load)} during the measurement"


def table(rows: list[dict], cold: float, rss: tuple, finished: int, live: int) -> str:
    def s(v, target=None):
        return "—" if v is None else f"{v:.2f}" + ("" if target is None else (" ✓" if v <= target else " ✗"))

    out = [
        f"{finished} finished runs + {live} live ones, `python experiments/thousand_runs.py` (Streamlit AppTest,"
        f" the server's script runs in this process). Machine: {machine_line()}.",
        "",
        f"| Page | first render, new session (s, target ≤ {TARGETS['first']:g}) "
        f"| auto-refresh, server time (s, target ≤ {TARGETS['refresh']:g}) | full rerun (s) |",
        "|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['page']} | {s(r['first'], TARGETS['first'])} | {s(r['refresh'], TARGETS['refresh'])} | {s(r['rerun'])} |"
        )
    base, total = rss
    out += [
        "",
        f"The server's first page after its start (imports included): {cold:.2f} s. Compare has no auto-refresh"
        " (it redraws on a change of the picker); its full rerun is what a change costs.",
        "",
        f"Server memory (resident): {total:.0f} MB after all pages (target ≤ {TARGETS['rss_mb']:g} MB), of which"
        f" {base:.0f} MB before any run was listed (Python, PyTorch, Streamlit, pandas, plotly imported:"
        f" `import torch` alone is about 500 MB resident here); the thousand runs and the pages add {total - base:.0f} MB.",
    ]
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--finished", type=int, default=1000)
    p.add_argument("--live", type=int, default=4)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--root", help="runs folder to make (default: a temporary one, removed afterwards)")
    p.add_argument("--markdown", help="write the table into this file between the thousand-runs markers")
    a = p.parse_args(argv)
    tmp = None if a.root else tempfile.mkdtemp(prefix="thousand-runs-")
    root = Path(a.root or tmp)
    root.mkdir(parents=True, exist_ok=True)
    os.environ["ADMM_RUNS"] = str(root)
    from app.dashboard import workers as W

    t = time.time()
    lives = make_runs(root, a.finished, a.live)
    print(f"made {a.finished} finished + {a.live} live runs in {time.time() - t:.1f} s", file=sys.stderr)
    try:
        from admm_core.runs import read_json

        deadline = time.time() + 120
        while time.time() < deadline and not all(
            (read_json(d / "status.json") or {}).get("state") == "running" for d in lives
        ):
            time.sleep(0.5)
        import streamlit.testing.v1  # noqa: F401 - the server's imports, before the baseline

        import app.ui  # noqa: F401

        base = rss_mb()
        rows, cold = measure(root, a.repeats)
        rss = (base, rss_mb())
    finally:
        for d in lives:
            W.stop_run(d)
    text = table(rows, cold, rss, a.finished, a.live)
    print(text)
    if a.markdown:
        md = Path(a.markdown)
        doc = md.read_text()
        start, end = "<!-- thousand-runs -->", "<!-- /thousand-runs -->"
        if start in doc and end in doc:
            doc = doc[: doc.index(start) + len(start)] + "\n" + text + "\n" + doc[doc.index(end) :]
        else:
            doc += f"\n{start}\n{text}\n{end}\n"
        md.write_text(doc)
        print(f"wrote {md}", file=sys.stderr)
    if tmp:
        time.sleep(2)  # the stopped workers write their last status
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
