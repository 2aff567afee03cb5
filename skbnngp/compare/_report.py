"""Reports: the text and Markdown tables, the legend, report.md, report.json and the
calibration figure."""

from __future__ import annotations

import math
import os
import platform
import re
from importlib import metadata

import numpy as np

from ._common import METRIC_DOCS, _metrics_for

_NUMBER = re.compile(r"[-+]?\d+(\.\d*)?([eE][-+]?\d+)?")  # folded when grouping warnings


def _decimals(metric, value):
    if metric.kind == "coverage" or metric.key in ("accuracy", "ece", "calibration_error"):
        return 3
    magnitude = abs(value) if value is not None and math.isfinite(value) else 1.0
    return 0 if magnitude >= 1000 else 1 if magnitude >= 10 else 2 if magnitude >= 1 else 3


#: Metrics in the units of y: printed in scientific notation when fixed decimals would show
#: no digit (y in millionths) or a long integer (y in billions).
_Y_UNITS = ("rmse", "mae", "crps", "width_90", "width_95")


def _scientific(metric, mean):
    return (metric.key in _Y_UNITS and math.isfinite(mean) and mean != 0
            and not 1e-2 <= abs(mean) < 1e5)


def _cell(metric, stat, sep, entry):
    mean, std = stat["mean"], stat["std"]
    if mean is None:  # no fold to average: every fit failed, or (interrupted) none finished
        return "failed" if entry.get("n_failed", 1) else "not run"
    if _scientific(metric, mean):
        return f"{mean:.2e}{sep}{std:.1e}"
    d = _decimals(metric, mean)
    return f"{mean:.{d}f}{sep}{std:.{d}f}"


def format_table(summary, task, markdown=False):
    """The comparison table: one row per estimator, ``mean ± std`` over the folds.

    Parameters
    ----------
    summary : dict
        ``{estimator: {metric: {"mean": float, "std": float}, "n_folds": int}}`` as in
        ``report.json``.
    task : {"regression", "classification"}
        Selects the metric columns.
    markdown : bool, default=False
        A Markdown table instead of aligned plain text.

    Returns
    -------
    table : str
    """
    cols = [m for m in _metrics_for(task) if m.in_table]
    sep = " ± " if markdown else "±"
    rows = [[name] + [_cell(m, entry[m.key], sep, entry) for m in cols]
            for name, entry in summary.items()]
    header = ["estimator"] + [m.header for m in cols]
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join(
            ["---"] + ["---:"] * len(cols)) + "|"]
        lines += ["| " + " | ".join([f"`{r[0]}`"] + r[1:]) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    fmt = [str.ljust] + [str.rjust] * len(cols)
    lines = ["  ".join(f(c, w) for f, c, w in zip(fmt, line, widths))
             for line in [header] + rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _legend(task, folds):
    if task == "regression":
        return (f"mean ± std over {folds} folds. Lower is better for RMSE, NLPD, CRPS and "
                "cal. err; coverage should be close to 0.90 / 0.95, with the narrowest width.")
    return (f"mean ± std over {folds} folds. Higher accuracy, lower NLL and ECE are better.")


# ============================================================================ report
def _environment():
    def version(dist):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    from .. import __version__

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
            cpu = next((line.split(":", 1)[1].strip() for line in fh
                        if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {"machine": f"{platform.system()} {platform.machine()}, {cpu}",
            "cpu_count": os.cpu_count(), "python": platform.python_version(),
            "versions": {"skbnngp": __version__, "scikit-learn": version("scikit-learn"),
                         "torch": version("torch"), "numpy": version("numpy"),
                         "scipy": version("scipy")}}


def _warning_lines(records, names):
    lines = []
    for name in names:
        rows = [r for r in records if r["estimator"] == name]
        errors = [f"fold {r['fold']}: {r['error']}" for r in rows if r["error"]]
        if errors:
            lines.append(f"`{name}` failed on {len(errors)} of {len(rows)} folds: "
                         + "; ".join(errors[:3]))
        seen = {}  # pattern (numbers blanked) -> (folds where it was raised, first message)
        for r in rows:
            for message in r["warnings"]:
                folds, example = seen.setdefault(_NUMBER.sub("#", message), (set(), message))
                folds.add(r["fold"])
        for folds, example in sorted(seen.values(), key=lambda v: -len(v[0]))[:5]:
            lines.append(f"`{name}` warned on {len(folds)} of {len(rows)} folds, e.g. {example}")
    return lines


def _markdown(report, table_md):
    env, data = report["environment"], report["data"]
    lines = [
        f"# skbnngp compare: {data['name']} ({report['task']})", "",
        f"{report['date']} · {env['machine']}, {env['cpu_count']} CPUs · Python "
        f"{env['python']}, " + ", ".join(f"{k} {v}" for k, v in env["versions"].items() if v),
        "",
        f"**Data**: {data['source']}: {data['n_samples']} samples × {data['n_features']} "
        f"features, target `{data['target']}`.",
        "",
        f"**Protocol**: {report['folds']}-fold cross-validation ({report['cv']}, shuffled, "
        f"random_state={report['random_state']}). Every estimator is a "
        "`Pipeline([StandardScaler(), estimator])`: inputs are standardised with the "
        "training-fold statistics; targets are left as they are. Device "
        f"`{report['device']}`; {report['n_jobs']} fit(s) at a time (n_jobs), "
        f"{report['threads']} thread(s) per fit; fit and predict times are wall-clock "
        "seconds" + (", measured while other fits ran" if report["n_jobs"] > 1 else "")
        + f". Wall time {report['total_seconds']:.0f} s.",
        "", table_md, "", _legend(report["task"], report["folds"]), "", "## Estimators", ""]
    lines += [f"- `{name}` ({e['source']}): `{e['repr']}`" for name, e in
              report["estimators"].items()]
    lines += ["", "## Metrics", ""] + [f"- {doc}" for doc in METRIC_DOCS[report["task"]]]
    notes = report["notes"] + report["problems"]
    if notes:
        lines += ["", "## Notes", ""] + [f"- {note}" for note in notes]
    if report["figure"]:
        lines += ["", f"![calibration]({report['figure']})"]
    lines += ["", f"Command: `{report['command']}`", ""]
    return "\n".join(lines)


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, np.generic):
        return _jsonable(obj.item())
    return obj


def _figure(path, report, records):
    """Calibration curves and interval coverage (regression) or a reliability diagram."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    names = [n for n, e in report["summary"].items() if e["n_folds"]]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.4))
    left.plot([0, 1], [0, 1], "k--", lw=1, label="ideal")
    x = np.arange(len(names))
    if report["task"] == "regression":
        for name in names:
            curves = [r["curve"] for r in records if r["estimator"] == name and r["curve"]]
            nominal = np.array(curves[0]["nominal"])
            left.plot(nominal, np.mean([c["observed"] for c in curves], axis=0), marker="o",
                      ms=3, label=name)
        left.set(xlabel="nominal coverage of the central interval", ylabel="observed coverage",
                 title="calibration (mean over folds)")
        for j, (level, key) in enumerate(((0.90, "coverage_90"), (0.95, "coverage_95"))):
            stat = [report["summary"][n][key] for n in names]
            right.bar(x + (j - 0.5) * 0.38, [s["mean"] for s in stat], 0.38,
                      yerr=[s["std"] for s in stat], capsize=3, label=f"{level:.0%} interval")
            right.axhline(level, color=f"C{j}", ls="--", lw=1)
        low = min([0.8] + [report["summary"][n]["coverage_90"]["mean"]
                           - report["summary"][n]["coverage_90"]["std"] - 0.05 for n in names])
        right.set(ylim=(low, 1.0), ylabel="observed coverage", title="interval coverage")
    else:
        for name in names:
            bins = [r["curve"] for r in records if r["estimator"] == name and r["curve"]]
            count = np.sum([b["count"] for b in bins], axis=0)
            ok = count > 0
            conf = np.sum([b["confidence_sum"] for b in bins], axis=0)[ok] / count[ok]
            acc = np.sum([b["correct_sum"] for b in bins], axis=0)[ok] / count[ok]
            left.plot(conf, acc, marker="o", ms=3, label=name)
        left.set(xlabel="confidence (top-label probability)", ylabel="accuracy",
                 title="reliability (pooled over folds)")
        for j, key in enumerate(("accuracy", "ece")):
            stat = [report["summary"][n][key] for n in names]
            right.bar(x + (j - 0.5) * 0.38, [s["mean"] for s in stat], 0.38,
                      yerr=[s["std"] for s in stat], capsize=3, label=key.upper()
                      if key == "ece" else key)
        right.set(ylim=(0, 1), title="accuracy and ECE")
    right.set_xticks(x, names, rotation=15, ha="right", fontsize=8)
    left.legend(fontsize=7)
    right.legend(fontsize=7)
    fig.suptitle(f"{report['data']['name']}: {report['folds']}-fold cross-validation",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# ============================================================================ command
