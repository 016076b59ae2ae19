"""Every dashboard page at 1440×1000 and 1280×800, as a user first sees it.

Against a running dashboard (``scripts/run.sh``, or ``streamlit run app/serve.py --server.port P``)
whose runs folder holds the runs to show; Compare opens on ``--compare`` (run ids, comma-separated):

    python experiments/page_screenshots.py http://127.0.0.1:8501 --out assets/pages \\
        --compare digits-block-admm-s0,digits-adam-s0

Writes ``OUT/<page>-<W>x<H>.png``. Uses the system Chromium and the browser tests' flags (app/chromium.py).

The README's Train page mid-run (``assets/dashboard-train.png``): a run going in that runs folder,

    python experiments/page_screenshots.py http://127.0.0.1:8501 --out /tmp/shot --pages train \
        --run RUN_ID --sizes 1440x1300 --scroll live --settle 20
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

from app.chromium import ARGS, CHROMIUM

SIZES = ((1440, 1000), (1280, 800))
PAGES = {"train": "/", "compare": "/compare", "heatmaps": "/heatmaps", "runs": "/runs", "sweeps": "/sweeps"}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("base", help="the dashboard's address, e.g. http://127.0.0.1:8501")
    p.add_argument("--out", default="assets/pages")
    p.add_argument("--compare", default="", help="run ids Compare opens on")
    p.add_argument("--settle", type=float, default=12.0, help="seconds for charts to paint")
    p.add_argument("--pages", default=",".join(PAGES), help="pages to take, comma-separated (default: all)")
    p.add_argument("--run", default="", help="run id Train and Runs open on (?run=)")
    p.add_argument("--sizes", default="", help="window sizes WxH, comma-separated (default: 1440x1000,1280x800)")
    p.add_argument("--scroll", default="", help="id of an element scrolled to the window's top first (e.g. live)")
    p.add_argument(
        "--train-query", default="", help="the Train page's link query, e.g. arch=tv-resnet18-cifar&data=cifar10"
    )
    a = p.parse_args(argv)
    sizes = [tuple(int(n) for n in s.split("x")) for s in a.sizes.split(",")] if a.sizes else SIZES
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        for w, h in sizes:
            for name, path in PAGES.items():
                if name not in a.pages.split(","):
                    continue
                if name == "compare" and a.compare:
                    path += f"?runs={a.compare}"
                if name in ("train", "runs") and a.run:
                    path += f"?run={a.run}"
                if name == "train" and a.train_query:
                    path += ("&" if "?" in path else "?") + a.train_query
                page = browser.new_page(viewport={"width": w, "height": h})
                page.goto(a.base.rstrip("/") + path)
                page.wait_for_selector("[data-testid='stSidebar']", timeout=60_000)
                time.sleep(a.settle)
                # a page still running (the toolbar's "Stop": a loaded machine, a first model load) is not
                # what a user sees once it has opened
                page.wait_for_function("() => !document.querySelector('[data-testid=stStatusWidget]')", timeout=180_000)
                time.sleep(2)
                if a.scroll:
                    page.locator(f"#{a.scroll}").scroll_into_view_if_needed()
                    page.evaluate("id => document.getElementById(id).scrollIntoView({block: 'start'})", a.scroll)
                    time.sleep(2)
                page.screenshot(path=str(out / f"{name}-{w}x{h}.png"))
                page.close()
                print(f"{name} {w}x{h}", flush=True)
        browser.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
