"""Reading studies back: the trial table, the best config, times, parameter importances, the
Markdown report and its PNG (matplotlib imported only inside :func:`importance_png`)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from ..spec.config import RunConfig
from .space import apply_params, fmt_value, preset_values
from .study import SweepSpec, counts


def trials_table(study) -> list[dict]:
    """One row per trial: number, state, value, params, run directory, epochs, duration."""
    rows = []
    for t in study.get_trials(deepcopy=False):
        # a queued retry carries its failed predecessor's user attributes: no run of its own yet
        run_dir = None if t.state.name == "WAITING" else t.user_attrs.get("run_dir")
        dur = t.duration.total_seconds() if t.duration else None
        rows.append(
            {
                "trial": t.number,
                "state": t.state.name.lower(),
                "value": t.value,
                **{k: t.params.get(k) for k in sorted(t.distributions)},
                "epochs": max(t.intermediate_values) if t.intermediate_values else 0,
                "seconds": dur,
                "preset": bool(t.user_attrs.get("preset")),
                "run": Path(run_dir).name if run_dir else None,
                "run_dir": run_dir,
            }
        )
    return rows


def best_config(study) -> RunConfig:
    """The best trial's RunConfig (read from its run directory, else rebuilt from its params)."""
    spec = SweepSpec.from_attrs(study.user_attrs["sweep"])
    best = study.best_trial
    run_dir = best.user_attrs.get("run_dir")
    if run_dir and (Path(run_dir) / "config.json").exists():
        return RunConfig.from_json((Path(run_dir) / "config.json").read_text())
    return apply_params(spec.base_config(), best.params)


def trial_time_s(study) -> float:
    """Seconds spent in trials, summed (a resumed study's idle gaps left out)."""
    return sum(t.duration.total_seconds() for t in study.get_trials(deepcopy=False) if t.duration)


def wall_time_s(study) -> float:
    """From the first trial's start to the last trial's end (idle gaps between resumes included)."""
    ts = [t for t in study.get_trials(deepcopy=False) if t.datetime_start]
    if not ts:
        return 0.0
    start = min(t.datetime_start for t in ts)
    end = max(t.datetime_complete or t.datetime_start for t in ts)
    return (end - start).total_seconds()


def importance_png(study, path: Path) -> Path | None:
    """Parameter importances (fANOVA) as a PNG through Optuna's matplotlib backend (no kaleido)."""
    import warnings

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization.matplotlib import plot_param_importances

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ax = plot_param_importances(study)
    fig = ax.figure
    fig.set_size_inches(7, 3.2)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def importances(study) -> dict:
    import optuna

    try:
        return optuna.importance.get_param_importances(study)
    except (RuntimeError, ValueError):
        return {}


def markdown_report(study, png: str | None = None, machine: str = "2-core CPU, shared with other jobs") -> str:
    """Best settings against the preset's, wall time and the trial table (written by ``sweep --markdown``)."""
    spec = SweepSpec.from_attrs(study.user_attrs["sweep"])
    rows = trials_table(study)
    c = counts(study)
    names = [d.name for d in spec.dims]
    base = spec.base_config()
    preset_row = next((r for r in rows if r["preset"] and r["state"] == "complete"), None)
    try:
        best = study.best_trial
    except ValueError:
        best = None
    lines = [
        f"# Sweep `{study.study_name}`",
        "",
        f"Written by `python -m admm_core sweep --name {study.study_name} --markdown …` on "
        f"{dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')} ({machine}).",
        "",
        f"- preset `{spec.preset}`, method `{spec.method}`, {base.train.epochs} epochs per trial, "
        f"objective `{spec.objective}` ({spec.direction}), pruner `{spec.pruner}`",
        f"- space: {', '.join(f'`{s}`' for s in spec.space)}",
        f"- trials: {c['complete']} complete, {c['pruned']} pruned, {c['fail']} failed (budget {spec.trials})",
        f"- time in trials: {trial_time_s(study) / 60:.1f} min (first start to last end: "
        f"{wall_time_s(study) / 60:.1f} min, including any pause before a resume)",
        "",
    ]
    done = c["complete"] + c["pruned"]
    if done < spec.trials:
        lines += [
            f"**Incomplete: {done} of {spec.trials} trials.** Continue it with "
            f"`python -m admm_core sweep --name {study.study_name}` (same runs folder / storage).",
            "",
        ]
    if best is not None:
        lines += [
            "## Best settings against the preset's",
            "",
            f"| setting | preset | best (trial {best.number}) |",
            "|---|---|---|",
        ]
        pv = preset_values(base, spec.dims)
        for n in names:
            lines.append(f"| {n} | {fmt_value(pv.get(n, '—'))} | {fmt_value(best.params.get(n))} |")
        pv_val = "—" if preset_row is None else fmt_value(preset_row["value"])
        lines.append(
            f"| **{spec.objective}** | {pv_val} (trial {preset_row['trial'] if preset_row else '—'}) | {fmt_value(best.value)} |"
        )
        lines.append("")
    imp = importances(study)
    if imp:
        lines += ["## Parameter importances (fANOVA)", ""]
        lines += [f"- {k}: {v:.2f}" for k, v in imp.items()]
        lines.append("")
        if png:
            lines += [f"![importances]({png})", ""]
    lines += ["## Trials", "", "| trial | state | " + " | ".join(names) + f" | {spec.objective} | epochs | s | run |"]
    lines.append("|" + "---|" * (len(names) + 6))
    for r in rows:
        v = "—" if r["value"] is None else fmt_value(r["value"])
        mark = " (preset)" if r["preset"] else ""
        secs = "—" if r["seconds"] is None else f"{r['seconds']:.0f}"
        cells = " | ".join(fmt_value(r.get(n)) for n in names)
        run = f"`{r['run']}`" if r["run"] else "—"
        lines.append(f"| {r['trial']}{mark} | {r['state']} | {cells} | {v} | {r['epochs']} | {secs} | {run} |")
    lines.append("")
    return "\n".join(lines)
