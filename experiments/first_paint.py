"""When does a dashboard page become usable in the browser, and what holds it back?

A probe beside ``thousand_runs.py``: the same runs folder (``--finished`` copied runs, ``--live``
real workers) served by ``streamlit run app/serve.py``, each page opened ``--tabs`` times in
headless Chromium. A script injected before the page's own records, in the page's clock:

- ``dom``: when the page's controls (or first chart) entered the document;
- ``painted``: the first animation frame after that (the browser can draw it then, no sooner);
- ``frames``: gaps between animation frames over 150 ms (the main thread busy, nothing drawn);
- the plotly code's fetch (Streamlit's PlotlyChart chunk, or plotly.min.js in the live charts' iframe).

Each ``--server NAME=VALUE,…`` is one server's environment, measured in turn on the same runs, so
settings are compared under the same load in one run. ``--live-only`` adds a server on copies of
the live runs alone (what the finished runs cost), ``--fresh`` opens each tab with a new profile,
``--dump`` keeps what a tab showed when its controls never did, ``--trace DIR`` each tab's Chromium
trace, with a table of where the page's main thread spent the time until the paint (and how long it
had nothing to do: waiting for the server).

    python experiments/first_paint.py --finished 1000 --live 4 --tabs 3 --server '' --server NAME=VALUE
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import thousand_runs as T  # its sibling: a script's own folder is first on sys.path

COLLECT = r"""
() => {
  const t = window.__probe;
  const res = [...performance.getEntriesByType("resource")];
  for (const f of document.querySelectorAll("iframe")) {  // the live charts load plotly.min.js in their iframe
    try {
      const p = f.contentWindow.performance, d = p.timeOrigin - performance.timeOrigin;
      res.push(...p.getEntriesByType("resource").map(e => ({name: e.name, startTime: e.startTime + d, responseEnd: e.responseEnd + d})));
    } catch (e) {}
  }
  const p = res.find(e => /PlotlyChart|plotly\.min\.js/.test(e.name));
  return {dom: t.dom, painted: t.painted, gaps: t.gaps, ws: t.ws, plotly: p ? [Math.round(p.startTime), Math.round(p.responseEnd)] : null};
}
"""

# --pages names (the first word of thousand_runs' row, lower case) -> (path, the control's probe name)
PAGES = {row.split()[0].lower(): (path, control) for row, path, control, *_ in T.BROWSER_PAGES}


def probe(
    urls: list[str],
    pages: list[str],
    tabs: int,
    wait_s: float,
    fresh: bool = False,
    dump: str | None = None,
    pids: list[int] | None = None,
    before_tab=None,
    dump_all: bool = False,
    trace: str | None = None,
) -> list[dict]:
    """Each page opened ``tabs`` times on each server, the servers taking turns tab by tab (so they
    share the same load); one new tab per page, in one browser context (caches warm after the first),
    or with ``fresh`` each tab in a new context (a new profile: nothing cached). A tab whose controls
    never showed leaves a screenshot, its text and its timings in ``dump``, and its server (of
    ``pids``) writes its threads' stacks into its log (app/serve.py's SIGUSR1 handler).
    ``dump_all`` keeps every tab's (no stacks). ``before_tab(turn)`` is called before each tab of the ``turn``-th url (``--worker-nice``).
    ``trace``: a folder for each tab's Chromium trace; the tab's row gets ``busy``, its renderer's main-thread
    work until the control was painted (:func:`main_thread_profile`)."""
    from playwright.sync_api import sync_playwright

    out = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=T.chromium_path(), args=T.chromium_args(), headless=True)
        try:

            def new_context():
                c = browser.new_context(viewport={"width": 1440, "height": 1000})
                c.add_init_script(T.PAINT_PROBE.replace("KEEP_RAW = false", f"KEEP_RAW = {str(bool(dump)).lower()}"))
                return c

            ctx = new_context()
            for url in urls:  # each server's first page pays its imports; the browser's caches fill
                warm = ctx.new_page()
                warm.goto(url + "/runs")
                warm.wait_for_timeout(wait_s * 1000 / 3)
                warm.close()
            for i in range(tabs):
                for server, url in enumerate(urls):
                    for name in pages:
                        path, control = PAGES[name]
                        if before_tab:
                            before_tab(server)
                        tab_ctx = new_context() if fresh else ctx
                        page = tab_ctx.new_page()
                        console: list[str] = []  # the tab's errors and warnings, kept with a dump
                        page.on("pageerror", lambda e, console=console: console.append(f"pageerror: {e}"))
                        page.on(
                            "console",
                            lambda m, console=console: (
                                console.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None
                            ),
                        )
                        if trace:
                            browser.start_tracing(page=page, categories=TRACE_CATEGORIES)
                        page.goto(url + path)
                        deadline = time.monotonic() + wait_s
                        r = {}
                        while time.monotonic() < deadline:
                            page.wait_for_timeout(500)
                            r = page.evaluate(COLLECT)
                            done = "chart" in r["painted"] or name in ("runs", "heatmaps")
                            if control in r["painted"] and done and (name != "train" or "start" in r["painted"]):
                                page.wait_for_timeout(300)
                                r = page.evaluate(COLLECT)
                                break
                        shown = set(r.get("painted", {}))
                        if trace:
                            stem = Path(trace) / f"s{server}-{name}-{i}.json"
                            stem.parent.mkdir(parents=True, exist_ok=True)
                            trace_json = browser.stop_tracing()
                            stem.write_bytes(trace_json)
                            r["busy"] = main_thread_profile(json.loads(trace_json), r["painted"].get(control))
                        if dump and (
                            dump_all or control not in shown or (name == "train" and "start" not in shown)
                        ):  # keep what it showed
                            stem = Path(dump) / f"s{server}-{name}-{i}"
                            Path(dump).mkdir(parents=True, exist_ok=True)
                            page.screenshot(path=f"{stem}.png", full_page=True)
                            Path(f"{stem}.txt").write_text(page.evaluate("document.body.innerText"))
                            raw = page.evaluate("window.__probe.raw")
                            Path(f"{stem}.json").write_text(json.dumps(r | {"console": console, "raw": raw}))
                            if pids and pids[server] and not dump_all:
                                os.kill(pids[server], signal.SIGUSR1)
                            if control not in shown or (name == "train" and "start" not in shown):
                                print(f"controls never shown: {stem}.*", file=sys.stderr, flush=True)
                        out.append(r | {"server": server, "page": name, "tab": i, "control": control})
                        page.close()
                        if fresh:
                            tab_ctx.close()
        finally:
            browser.close()
    return out


TRACE_CATEGORIES = [
    "devtools.timeline",
    "disabled-by-default-devtools.timeline",
    "blink.user_timing",
    "loading",
    "toplevel",
    "v8.execute",
]
# trace events named for what the main thread did; the others count as "other" under their name
_KIND = {
    "EvaluateScript": "script",
    "v8.evaluateModule": "script",
    "FunctionCall": "script",
    "TimerFire": "script",
    "FireAnimationFrame": "script",
    "EventDispatch": "script",
    "v8.compile": "compile",
    "v8.compileModule": "compile",
    "v8.produceCache": "compile",
    "v8.produceModuleCache": "compile",
    "CacheScript": "compile",
    "ParseHTML": "parse HTML",
    "ParseAuthorStyleSheet": "style",
    "UpdateLayoutTree": "style",
    "RecalculateStyles": "style",
    "Layout": "layout",
    "PrePaint": "paint",
    "Paint": "paint",
    "Layerize": "paint",
    "UpdateLayer": "paint",
    "Commit": "paint",
    "MajorGC": "GC",
    "MinorGC": "GC",
    "V8.GCScavenger": "GC",
    "BlinkGC.AtomicPhase": "GC",
}


def _page_load(data: dict) -> bool:
    """A navigation of a tab's main frame to a served page (not about:blank, not the browser's own pages)."""
    return bool(data.get("isLoadingMainFrame")) and data.get("documentLoaderURL", "").startswith("http")


def main_thread_profile(trace: dict, until_ms: float | None) -> dict:
    """Where the tab's renderer main thread spent the time from the navigation to ``until_ms`` (page
    clock): self time in ms per kind (script, compile, style, layout, paint, parse HTML, GC, other),
    script and compile split by the file they ran (its last path part; iframes share the thread), and
    ``idle`` (no task running); they add up to ``until_ms``. Self time: an event's length (up to ``until_ms``)
    less that of the events nested in it."""
    ev = trace["traceEvents"] if isinstance(trace, dict) else trace
    names = {
        (e["pid"], e["tid"]): e["args"].get("name") for e in ev if e.get("ph") == "M" and e.get("name") == "thread_name"
    }
    nav = [e for e in ev if e.get("name") == "navigationStart" and _page_load(e.get("args", {}).get("data") or {})]
    if not nav:
        return {}
    nav = nav[0]  # the tab's page; its iframes' navigations are not the main frame's
    main = (nav["pid"], nav["tid"])
    if names.get(main) != "CrRendererMain":
        return {}
    end = nav["ts"] + (until_ms if until_ms is not None else 30_000) * 1000
    xs = sorted(
        (e for e in ev if (e["pid"], e["tid"]) == main and e.get("ph") == "X" and nav["ts"] <= e["ts"] < end),
        key=lambda e: (e["ts"], -e.get("dur", 0)),
    )
    out: dict[str, float] = {}
    stack: list[list] = []  # [event, end, child time, url]
    top = 0.0

    def close(item):
        e, stop, child, url = item
        kind = _KIND.get(e["name"], f"other: {e['name']}")
        if kind in ("script", "compile") and url:
            kind = f"{kind}: {url.rsplit('/', 1)[-1].split('?')[0][:48]}"
        out[kind] = out.get(kind, 0.0) + max(stop - e["ts"] - child, 0) / 1000

    for e in xs:
        while stack and e["ts"] >= stack[-1][1]:
            close(stack.pop())
        data = e.get("args", {}).get("data", {}) or {}
        url = data.get("url") or data.get("scriptName") or (stack[-1][3] if stack else "")
        stop = min(e["ts"] + e.get("dur", 0), end)  # cut at the paint: the kinds and idle add up to until_ms
        if stack:
            stack[-1][2] += stop - e["ts"]
        else:
            top += stop - e["ts"]
        stack.append([e, stop, 0, url])
    while stack:
        close(stack.pop())
    out["idle"] = (end - nav["ts"] - top) / 1000
    return {k: round(v, 1) for k, v in sorted(out.items(), key=lambda kv: -kv[1])}


def _s(ms) -> str:
    return "—" if ms is None else f"{ms / 1000:.2f}"


def detail(rows: list[dict], labels: list[str]) -> str:
    """One line per tab: when the messages came, the controls entered the page and were painted,
    the plotly code was fetched, the chart was painted, and where the main thread was busy."""
    head = "| server | page | tab | first message (s) | messages > 200 B (s, count) | controls in DOM (s) | controls painted (s) "
    head += "| plotly fetched (s) | chart painted (s) | frame gaps > 150 ms (start s: length s) |"
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        c, ws, p = r["control"], r.get("ws") or [], r["plotly"]
        big = [w for w in ws if w[1] > 200]
        span = f"{big[0][0] / 1000:.2f}–{big[-1][0] / 1000:.2f} ({len(big)})" if big else "—"
        gaps = ", ".join(f"{a / 1000:.1f}: {b / 1000:.2f}" for a, b in r["gaps"][:6])
        pf = "—" if not p else f"{p[0] / 1000:.2f}–{p[1] / 1000:.2f}"
        lines.append(
            f"| {labels[r['server']]} | {r['page']} | {r['tab']} | {_s(ws[0][0] if ws else None)} | {span} "
            f"| {_s(r['dom'].get(c))} | {_s(r['painted'].get(c))} | {pf} | {_s(r['painted'].get('chart'))} | {gaps} |"
        )
    return "\n".join(lines)


def busy_table(rows: list[dict], labels: list[str], top: int = 14) -> str:
    """Per server and page: the main thread's mean time (ms) per kind of work until the control was
    painted (``--trace``), the ``top`` largest."""
    lines = [
        "| server setting | page | tabs | until painted (ms) | main thread, mean ms per kind of work |",
        "|---|---|---|---|---|",
    ]
    for server, label in enumerate(labels):
        for page in dict.fromkeys(r["page"] for r in rows):
            rs = [r["busy"] for r in rows if r["server"] == server and r["page"] == page and r.get("busy")]
            if not rs:
                continue
            kinds: dict[str, float] = {}
            for b in rs:
                for k, v in b.items():
                    kinds[k] = kinds.get(k, 0.0) + v / len(rs)
            total = sum(kinds.values())
            parts = ", ".join(f"{k} {v:.0f}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])[:top])
            lines.append(f"| {label} | {page} | {len(rs)} | {total:.0f} | {parts} |")
    return "\n".join(lines)


def summary(rows: list[dict], labels: list[str]) -> str:
    """Per server setting and page: the median (min–max) time until the controls were painted, until
    the Train form's Start run button was (the whole form above it drawn), and until the first chart was."""
    lines = [
        "| server setting | page | tabs | controls painted, median (min–max) s "
        "| Start run painted (Train), median s | first chart painted, median s |"
    ]
    lines.append("|---|---|---|---|---|---|")
    for server, label in enumerate(labels):
        for page in dict.fromkeys(r["page"] for r in rows):
            rs = [r for r in rows if r["server"] == server and r["page"] == page]
            ctl = [r["painted"].get(r["control"], float("inf")) for r in rs]
            ch = [r["painted"]["chart"] for r in rs if "chart" in r["painted"]]
            go = [r["painted"].get("start", float("inf")) for r in rs]
            med = statistics.median(ctl)
            mark = " ✓" if med <= 2000 else " ✗"
            lines.append(
                f"| {label} | {page} | {len(rs)} | {_s(med)}{mark} ({_s(min(ctl))}–{_s(max(ctl))}) "
                f"| {_s(statistics.median(go)) if page == 'train' else '—'} | {_s(statistics.median(ch)) if ch else '—'} |"
            )
    return "\n".join(lines)


def decode(path: str) -> str:
    """A dump's websocket messages (``--dump``), one line each: when (page clock, ms), the message's
    kind, and for a delta its path, fragment and label; for a run's start its page and fragments."""
    import base64

    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    r = json.loads(Path(path).read_text())
    lines = [f"console: {c.splitlines()[0]}" for c in r.get("console", [])]
    for (ms, _), raw in zip(r["ws"], r.get("raw", [])):
        m = ForwardMsg()
        m.ParseFromString(base64.b64decode(raw))
        kind, text = m.WhichOneof("type"), ""
        if kind == "delta":
            d = m.delta
            what = d.WhichOneof("type")
            sub = getattr(d, what).WhichOneof("type") if what in ("new_element", "add_block") else ""
            el = getattr(d.new_element, sub) if what == "new_element" else None
            label = getattr(el, "label", "") if el is not None and hasattr(el, "label") else ""
            text = f"{what}:{sub} path={list(m.metadata.delta_path)} fragment={d.fragment_id[:8]} {label!r}"
        elif kind == "new_session":
            run = m.metadata.run
            text = f"page={m.new_session.page_script_hash[:8]} run={run.script_run_id[:6]} fragments={list(run.fragment_ids)}"
        elif kind == "script_finished":
            text = ForwardMsg.ScriptFinishedStatus.Name(m.script_finished)
        lines.append(f"{ms} {kind} {text}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--finished", type=int, default=1000)
    p.add_argument("--live", type=int, default=4)
    p.add_argument("--tabs", type=int, default=3)
    p.add_argument("--pages", default="compare,train")
    p.add_argument("--wait", type=float, default=30.0)
    p.add_argument(
        "--server",
        action="append",
        help="one server's environment, NAME=VALUE[,NAME=VALUE…] ('' for none; APP=…/app/serve.py serves "
        "another checkout, e.g. a git worktree of the code before a change); the servers take turns",
    )
    p.add_argument("--fresh", action="store_true", help="each tab in a new browser context (nothing cached)")
    p.add_argument(
        "--live-only",
        action="store_true",
        help="one more server, on a folder holding copies of the live runs only (their workers still "
        "write to the originals): what the finished runs cost the pages, under the same load",
    )
    p.add_argument(
        "--worker-nice",
        help="comma list, e.g. 5,19: the live workers' autogroup niceness, set before each tab and taken in "
        "turns tab by tab like the servers (each server is measured at each niceness); needs root to lower it",
    )
    p.add_argument("--dump", help="a folder for what a tab showed when its controls never did")
    p.add_argument("--dump-all", action="store_true", help="keep every tab's in --dump (read with --decode)")
    p.add_argument("--trace", help="a folder for each tab's Chromium trace; prints where the main thread went")
    p.add_argument("--markdown", help="write the summary into this file between the first-paint markers")
    p.add_argument("--root", help="a runs folder to keep (its finished runs are made once, reused after)")
    p.add_argument("--decode", metavar="DUMP_JSON", help="print a dumped tab's console and messages, and stop")
    a = p.parse_args(argv)
    if a.decode:
        print(decode(a.decode))
        return 0
    if a.live_only and a.live < 1:
        p.error("--live-only copies the live runs: give --live 1 or more")
    tmp = None if a.root else tempfile.mkdtemp(prefix="first-paint-")
    root = Path(a.root or tmp)
    live_root = root.parent / f"{root.name}-live-only"  # --live-only: copies of the live runs
    os.environ["ADMM_RUNS"] = str(root)
    from app.dashboard import workers as W

    root.mkdir(parents=True, exist_ok=True)
    have = a.root and any(root.iterdir())
    lives = T.make_runs(root, 0 if have else a.finished, a.live)  # a kept folder: only the live runs are new
    procs = []
    try:
        time.sleep(5 if lives else 0)
        specs = a.server or [""]
        labels = [spec or "defaults" for spec in specs]
        urls = []
        for i, spec in enumerate(specs):
            saved = dict(os.environ)
            env = dict(kv.split("=", 1) for kv in spec.split(",") if kv)
            script = Path(env.pop("APP", T.ROOT / "app" / "serve.py"))
            os.environ.update(env)
            try:
                proc, url = T.start_server(root, root.parent / f"{root.name}-{i}.log", script)
            finally:
                os.environ.clear()
                os.environ.update(saved)
            procs.append(proc)
            urls.append(url)
        if a.live_only:
            # a copy of a live run keeps its worker's pid in status.json, so it is listed as running
            shutil.rmtree(live_root, ignore_errors=True)
            for d in lives:
                shutil.copytree(d, live_root / Path(d).name, ignore=shutil.ignore_patterns("*.tmp", "checkpoint.pt"))
            proc, url = T.start_server(live_root, root.parent / f"{root.name}-live-only.log")
            procs.append(proc)
            urls.append(url)
            labels.append(f"{len(W.runs(live_root))} live runs only (copies)")
        load0 = open("/proc/loadavg").read().split()[:3]
        live = sum(r["status"].get("state") in ("running", "starting") for r in W.runs(root))
        # only this checkout's servers dump their threads on SIGUSR1 (it ends an older one): 0 = none
        pids = [0 if "APP=" in spec else p.pid for spec, p in zip(specs + [""], procs)]
        nices = [int(n) for n in a.worker_nice.split(",")] if a.worker_nice else [None]
        if a.worker_nice:  # every (server, niceness) pair is one turn
            urls = [u for u in urls for _ in nices]
            pids = [p for p in pids for _ in nices]
            labels = [f"{lab} · workers' autogroup niceness {n}" for lab in labels for n in nices]

        def before_tab(turn: int) -> None:
            for d in lives:  # the worker's session is its autogroup: one write renices all its threads
                Path(f"/proc/{W.worker_pid(d)}/autogroup").write_text(str(nices[turn % len(nices)]))

        rows = probe(
            urls,
            a.pages.split(","),
            a.tabs,
            a.wait,
            a.fresh,
            a.dump,
            pids,
            before_tab if a.worker_nice else None,
            a.dump_all,
            a.trace,
        )
        text = (
            f"{len(W.runs(root)) - live} finished runs + {live} live ones; `python experiments/first_paint.py "
            f"{shlex.join(argv if argv is not None else sys.argv[1:])}`. Machine: {T.machine_line()} "
            f"(at the start: {' '.join(load0)}). The servers took turns tab by tab; each page was opened "
            f"{a.tabs} times per server in a new tab "
            + (
                "with a new profile (nothing cached).\n\n"
                if a.fresh
                else "of one browser (caches warm after the first).\n\n"
            )
            + summary(rows, labels)
        )
        print(text)
        print("\n" + detail(rows, labels))
        if a.trace:
            print("\n" + busy_table(rows, labels))
        if a.markdown:
            T.write_block(Path(a.markdown), "first-paint", text)
    finally:
        for proc in procs:
            T.stop_server(proc)
        for d in lives:
            W.stop_run(d)
        if a.live_only:
            shutil.rmtree(live_root, ignore_errors=True)
        if tmp:
            time.sleep(2)
            shutil.rmtree(tmp, ignore_errors=True)
            for f in Path(tmp).parent.glob(f"{Path(tmp).name}-*.log"):
                f.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
