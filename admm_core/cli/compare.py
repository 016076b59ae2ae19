"""``admm compare RUN_DIR [RUN_DIR ...]``: what differs between runs and how they ended.

The dashboard's Compare table on the command line, made by the same functions
(:mod:`admm_core.compare`): per run its legend (what tells it apart), status, final and best test
accuracy, the paper's figure where the setup is the paper's, and a ``⚙ <setting>`` column for each
setting that differs. ``--csv``: the series the Compare page plots, as its "Download the charts'
data (CSV)" writes them.
"""

from __future__ import annotations

from pathlib import Path

from .. import compare as X
from ..rundir import read_json_dict, read_metrics
from ..spec.kinds import DEEPFACTO, run_kind
from ..spec.presets import PAPER
from ..status import run_status

NAME = "compare"
# the table's leading columns, as the Compare page orders them; the ⚙ settings and the paper's verdict follow
COLUMNS = ("run", "legend", "status", "epochs", "final test %", "best test %", "best epoch", "paper test %")


def add_parser(sub) -> None:
    c = sub.add_parser(NAME, help="what differs between runs, and their final and best test accuracy")
    c.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories (each with its config.json)")
    c.add_argument(
        "--csv", action="store_true", help="print the plotted series as CSV (the Compare page's download) instead"
    )
    c.add_argument("--x", choices=("epoch", "wall_time_s"), default="epoch", help="the x column of --csv")
    c.add_argument(
        "--group-by",
        default="nothing",
        metavar="CHOICE",
        help="name each run's group as the Compare page's 'Group runs by' does: seeds, method, "
        "'method × <setting>' or a setting (its config key, e.g. m.lr); a group column in the table and the CSV",
    )
    c.set_defaults(func=run)


def read_run(path: str) -> dict:
    """A run directory as the comparison reads it: {name (the path as given), config, status, metrics}."""
    d = Path(path)
    if not (d / "config.json").is_file():
        raise FileNotFoundError(f"{path}: no config.json here (not a run directory)")
    return {
        "name": path,
        "config": read_json_dict(d / "config.json"),
        "status": run_status(d),
        "metrics": read_metrics(d),
    }


def _cell(v) -> str:
    return "—" if v is None or v == "" else str(v)  # a value the run lacks, as the page shows it


def text_table(rows: list[dict], columns: list[str]) -> str:
    """``rows`` as aligned text columns, a header line first."""
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(line[i]) for line in cells)) for i, c in enumerate(columns)]
    lines = [columns, *cells]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip() for line in lines)


def run(a) -> int:
    recs = [read_run(p) for p in a.runs]
    cfgs = [r["config"] for r in recs]
    options = [o for o in X.group_options(cfgs) if o != "tag"]  # tags are the dashboard's (meta.json)
    if a.group_by not in options:
        raise ValueError(f"--group-by {a.group_by!r}: choose from {options} for these runs")
    legends = X.legend_labels(cfgs)
    groups = X.group_labels(cfgs, [[] for _ in recs], a.group_by) if a.group_by != "nothing" else [""] * len(recs)
    if a.csv:
        nets, faces = [], []  # DeepFacto runs have their own charts, as on the page
        for r, legend, group in zip(recs, legends, groups):
            item = X.Series(r["name"], legend, r["metrics"], group)
            (faces if run_kind(r["config"], r["status"]) == DEEPFACTO else nets).append(item)
        print(X.compare_csv(nets, faces, a.x), end="")
        return 0
    rows, differ = X.compare_table(recs, [r["metrics"] for r in recs], PAPER)
    for row, legend, group in zip(rows, legends, groups):
        row.update(legend=legend, group=group)
    gears = [f"⚙ {k}" for k in differ if k != "method"]  # the method leads the legend
    columns = [*COLUMNS[:2], *(["group"] if a.group_by != "nothing" else []), *COLUMNS[2:], *gears, "paper"]
    if all(row["paper test %"] is None for row in rows):  # no run has the paper's setup: "paper" says why
        columns.remove("paper test %")
    print(text_table(rows, columns))
    said = ", ".join(differ) if differ else "none (the legends number runs alike in every setting)"
    print(f"\nsettings that differ: {said}")
    return 0
