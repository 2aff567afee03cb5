"""``skbnngp compare`` end to end on tiny data, and its one-line errors on bad input."""

import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.model_selection import KFold

from skbnngp import cli, metrics
from skbnngp.compare import _common, _registry, _report
from skbnngp.compare import _run as compare_run
from skbnngp.utils import all_estimators

FAST = ["--folds", "2", "--max-iter", "5", "--device", "cpu", "--quiet", "--n-jobs", "1"]


def _run(argv):
    out, err = io.StringIO(), io.StringIO()
    status = cli.main(argv, stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


def _write_csv(path, header, rows):
    path.write_text("\n".join([",".join(header)] + [",".join(map(str, r)) for r in rows]) + "\n")
    return path


@pytest.fixture
def regression_csv(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, size=(40, 3))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.normal(size=40)
    rows = [[f"{v:.6f}" for v in row] + [f"{t:.6f}"] for row, t in zip(X, y)]
    return _write_csv(tmp_path / "tiny.csv", ["a", "b", "c", "y"], rows)


def test_compare_regression_end_to_end(regression_csv, tmp_path):
    out_dir = tmp_path / "out"
    status, out, err = _run(["compare", "--csv", str(regression_csv), "--target", "y",
                             "-e", "stp", "GPR", "-o", str(out_dir)] + FAST)
    assert status == 0, err
    assert err == ""  # --quiet: no progress bar
    for name in ("StudentTProcessRegressor", "GaussianProcessRegressor"):
        assert name in out
    assert "cov 95%" in out and "StandardScaler" in out

    report = json.loads((out_dir / "report.json").read_text())
    assert report["task"] == "regression" and report["folds"] == 2 and report["n_jobs"] == 1
    assert report["data"] == {"name": "tiny", "source": f"CSV file `{regression_csv}`",
                              "n_samples": 40, "n_features": 3, "target": "y",
                              "feature_names": ["a", "b", "c"]}
    assert list(report["summary"]) == ["StudentTProcessRegressor", "GaussianProcessRegressor"]
    for entry in report["summary"].values():
        assert entry["n_folds"] == 2
        for key in ("rmse", "nlpd", "crps", "coverage_90", "coverage_95", "width_95",
                    "calibration_error", "fit_s", "predict_s"):
            assert np.isfinite(entry[key]["mean"]) and entry[key]["std"] >= 0
        assert 0 <= entry["coverage_90"]["mean"] <= entry["coverage_95"]["mean"] <= 1
    # the summary is the mean and std of the per-fold results
    folds = [r for r in report["fold_results"] if r["estimator"] == "GaussianProcessRegressor"]
    crps = [r["metrics"]["crps"] for r in folds]
    assert report["summary"]["GaussianProcessRegressor"]["crps"]["mean"] == pytest.approx(
        np.mean(crps))
    assert report["summary"]["GaussianProcessRegressor"]["crps"]["std"] == pytest.approx(
        np.std(crps))

    md = (out_dir / "report.md").read_text()
    assert "| estimator | RMSE | NLPD | CRPS | cov 90% | cov 95% |" in md
    assert "| `StudentTProcessRegressor` |" in md and " ± " in md
    assert "Pipeline([StandardScaler(), estimator])" in md
    assert "![calibration](calibration.png)" in md
    assert (out_dir / "calibration.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_compare_metrics_match_a_direct_computation(regression_csv, tmp_path):
    """The report's numbers for sklearn's GPR equal the metrics called by hand on its folds."""
    status, _, err = _run(["compare", "--csv", str(regression_csv), "--target", "y",
                           "-e", "gpr", "-o", str(tmp_path / "o"), "--random-state", "3"]
                          + FAST)
    assert status == 0, err
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    data = np.loadtxt(regression_csv, delimiter=",", skiprows=1)
    X, y = data[:, :3], data[:, 3]
    folds = KFold(2, shuffle=True, random_state=3).split(X)
    for k, (train, test) in enumerate(folds):
        pipe = _registry._build("GaussianProcessRegressor", _registry._candidates("regression"), 3,
                          cli.build_parser().parse_args(["compare", "--random-state", "3"]))
        pipe.fit(X[train], y[train])
        dist = compare_run._predictive(pipe, X[test])
        mean, std = pipe.predict(X[test], return_std=True)
        got = report["fold_results"][k]["metrics"]
        assert report["fold_results"][k]["fold"] == k
        assert got["rmse"] == pytest.approx(np.sqrt(np.mean((mean - y[test]) ** 2)), rel=1e-6)
        assert got["nlpd"] == pytest.approx(metrics.nlpd(y[test], dist), rel=1e-6)
        lo, hi = mean - 1.959964 * std, mean + 1.959964 * std
        assert got["coverage_95"] == pytest.approx(np.mean((y[test] >= lo) & (y[test] <= hi)))
        assert got["calibration_error"] == pytest.approx(
            metrics.regression_calibration_error(y[test], dist), abs=1e-12)


def test_compare_classification(tmp_path):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(36, 2))
    labels = np.where(X[:, 0] + 0.3 * rng.normal(size=36) > 0, "yes", "no")
    path = _write_csv(tmp_path / "cls.csv", ["x1", "x2", "label"],
                      [[f"{a:.5f}", f"{b:.5f}", c] for (a, b), c in zip(X, labels)])
    status, out, err = _run(["compare", "--csv", str(path), "--target", "label",
                             "-o", str(tmp_path / "o"), "-e", "stp", "gpc"] + FAST)
    assert status == 0, err
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert report["task"] == "classification" and report["cv"] == "StratifiedKFold"
    assert list(report["summary"]) == ["StudentTProcessClassifier", "GaussianProcessClassifier"]
    for entry in report["summary"].values():
        assert 0 <= entry["accuracy"]["mean"] <= 1 and 0 <= entry["ece"]["mean"] <= 1
        assert entry["nll"]["mean"] > 0
    assert "accuracy" in out and "ECE" in out and "NLPD" not in out
    assert "| estimator | accuracy | NLL | ECE | fit s | predict s |" in (
        tmp_path / "o" / "report.md").read_text()
    assert (tmp_path / "o" / "calibration.png").exists()


def test_dropna_and_one_hot(tmp_path):
    rng = np.random.default_rng(2)
    rows = [[f"{v:.4f}", ["red", "green", "blue"][i % 3], f"{2 * v + (i % 3):.4f}"]
            for i, v in enumerate(rng.normal(size=30))]
    rows[4][0], rows[9][2], rows[12][1] = "", "NA", "?"
    path = _write_csv(tmp_path / "mixed.csv", ["x", "colour", "y"], rows)
    argv = ["compare", "--csv", str(path), "--target", "y", "-e", "gpr",
            "-o", str(tmp_path / "o")] + FAST
    status, _, err = _run(argv + ["--one-hot"])
    assert status == 2
    assert err == (f"skbnngp compare: error: 3 of 30 rows of {str(path)!r} have missing or "
                   "non-finite values (first on line 6); pass --dropna to drop them\n")
    status, out, err = _run(argv + ["--one-hot", "--dropna"])
    assert status == 0, err
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert report["data"]["n_samples"] == 27
    assert report["data"]["feature_names"] == ["x", "colour=blue", "colour=green", "colour=red"]
    assert "--dropna dropped 3 of 30 rows with missing values" in out
    assert "one-hot encoded into 3 columns" in (tmp_path / "o" / "report.md").read_text()


def _csv_args(path, **kw):
    import argparse
    base = dict(csv=str(path), dataset=None, target="y", drop=[], one_hot=False, sep=None,
                dropna=False, task=None, max_samples=None, folds=2, random_state=0)
    return argparse.Namespace(**{**base, **kw})


def test_csv_with_semicolons_and_decimal_commas_is_read_as_numbers(tmp_path):
    """A European CSV (``;`` between fields, ``,`` before decimals) parses to the same numbers
    as the plain file; nothing asks for --one-hot."""
    from skbnngp.compare._data import _load
    rng = np.random.default_rng(3)
    X, y = rng.normal(size=(12, 2)), rng.normal(size=12)
    plain = _write_csv(tmp_path / "plain.csv", ["a", "b", "y"],
                       [[f"{v:.4f}" for v in (*row, t)] for row, t in zip(X, y)])
    euro = tmp_path / "euro.csv"
    euro.write_text(plain.read_text().replace(",", ";").replace(".", ","))
    want, got = _load(_csv_args(plain)), _load(_csv_args(euro))
    np.testing.assert_array_equal(got.X, want.X)
    np.testing.assert_array_equal(got.y, want.y)
    np.testing.assert_allclose(got.X, np.round(X, 4))
    assert got.feature_names == ["a", "b"] and got.task == "regression"
    assert "numbers with a decimal comma were read as decimals" in got.notes
    # a text column in a semicolon file is still text, and the hint names it
    text = tmp_path / "text.csv"
    text.write_text("a;kind;y\n1,5;x;2,0\n2,5;y;1,0\n3,0;x;0,5\n")
    with pytest.raises(_common.UsageError, match=r"feature column 'kind' is not numeric "
                                                  r"\('x' on line 2\)"):
        _load(_csv_args(text))


def test_one_hot_columns_match_the_categories(tmp_path):
    from skbnngp.compare._data import _load
    path = _write_csv(tmp_path / "cat.csv", ["x", "my_colour", "y"],
                      [[i, c, i % 3] for i, c in enumerate(["red", " blue", "red", "green",
                                                            "blue", "green"])])
    data = _load(_csv_args(path, one_hot=True))
    assert data.feature_names == ["x", "my_colour=blue", "my_colour=green", "my_colour=red"]
    np.testing.assert_array_equal(data.X[:, 0], np.arange(6))
    np.testing.assert_array_equal(data.X[:, 1:].argmax(axis=1), [2, 0, 2, 1, 0, 1])
    np.testing.assert_array_equal(data.X[:, 1:].sum(axis=1), np.ones(6))


def test_malformed_csv_files_are_named(tmp_path):
    from skbnngp.compare._data import _load
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("a,b,y\n1,2,3\n4,5,6,7\n")
    with pytest.raises(_common.UsageError, match="line 3: 4 fields, expected 3"):
        _load(_csv_args(ragged))
    dup = tmp_path / "dup.csv"
    dup.write_text("a,a,y\n1,2,3\n4,5,6\n")
    with pytest.raises(_common.UsageError, match="duplicate column names: a"):
        _load(_csv_args(dup))
    empty = tmp_path / "empty.csv"
    empty.write_text("a,b,y\n")
    with pytest.raises(_common.UsageError, match="has a header but no data rows"):
        _load(_csv_args(empty))


class _Broken(RegressorMixin, BaseEstimator):
    def fit(self, X, y):
        raise RuntimeError("broken on purpose\nsecond line")


def test_a_failing_estimator_is_reported_and_the_run_goes_on(regression_csv, tmp_path,
                                                            monkeypatch):
    monkeypatch.setitem(_registry.SKLEARN_BASELINES, "regression",
                        ("BrokenRegressor", ("broken",), lambda d: _Broken()))
    status, out, err = _run(["compare", "--csv", str(regression_csv), "--target", "y",
                             "-e", "broken", "stp", "-o", str(tmp_path / "o"), "--folds", "2",
                             "--max-iter", "5", "--device", "cpu", "--n-jobs", "1"])
    assert status == 1
    lines = err.splitlines()
    assert "4/4 fits" in lines[-2]  # the progress bar, one line per fit off a terminal
    assert lines[-1].startswith("skbnngp compare: 2 of 4 fits failed")
    assert "BrokenRegressor failed on 2 of 2 folds: fold 0: RuntimeError: broken on purpose" in out
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert report["summary"]["BrokenRegressor"]["rmse"] == {"mean": None, "std": None}
    assert report["summary"]["StudentTProcessRegressor"]["n_folds"] == 2
    assert "| `BrokenRegressor` | failed |" in (tmp_path / "o" / "report.md").read_text()


def test_default_estimators_are_discovered():
    for task, kind, baseline in (("regression", "regressor", "GaussianProcessRegressor"),
                                 ("classification", "classifier", "GaussianProcessClassifier")):
        names, _ = _registry._resolve_estimators(None, task)
        assert names == [n for n, _ in all_estimators(kind)] + [baseline]
    names, _ = _registry._resolve_estimators(["STP,gpr", "studenttprocessregressor"], "regression")
    assert names == ["StudentTProcessRegressor", "GaussianProcessRegressor"]
    status, out, _ = _run(["compare", "--list"])
    assert status == 0
    assert all(name in out for name, _ in all_estimators())


def _bad_inputs(tmp_path, csv_path):
    text = _write_csv(tmp_path / "text.csv", ["a", "kind", "y"],
                      [[1, "x", 1.0], [2, "y", 2.0], [3, "x", 3.5], [4, "y", 1.5]])
    return {
        "missing csv": (["--csv", str(tmp_path / "nope.csv"), "--target", "y"],
                        f"CSV file {str(tmp_path / 'nope.csv')!r} not found"),
        "absent column": (["--csv", str(csv_path), "--target", "price"],
                          f"target column 'price' is not in {str(csv_path)!r}; columns: "
                          "a, b, c, y"),
        "non-numeric column": (["--csv", str(text), "--target", "y"],
                               "feature column 'kind' is not numeric ('x' on line 2); pass "
                               "--one-hot to encode non-numeric columns or --drop them"),
        "no target": (["--csv", str(csv_path)], "--csv needs --target COLUMN; columns: "
                      "a, b, c, y"),
        "unknown estimator": (["--csv", str(csv_path), "--target", "y", "-e", "stp", "xgb"],
                              "unknown estimator 'xgb' for regression; valid names "
                              "(case-insensitive): "),
        "classifier on regression data": (["diabetes", "-e", "gpc"],
                                          "unknown estimator 'gpc' for regression "
                                          "(GaussianProcessClassifier is a classifier"),
        "unknown dataset": (["housing"], "unknown data set 'housing'; choose one of "),
        "too many folds": (["--csv", str(text), "--target", "y", "--drop", "kind"],
                           "4 rows are too few for 5-fold cross-validation"),
        "bad option": (["--folds", "1"], "argument --folds: must be at least 2, got 1"),
        "unknown option": (["--bogus"], "unrecognized arguments: --bogus"),
    }


def test_bad_input_gives_one_line_and_status_2(tmp_path, regression_csv):
    for case, (argv, message) in _bad_inputs(tmp_path, regression_csv).items():
        status, out, err = _run(["compare"] + argv + ["-o", str(tmp_path / "o")])
        assert status == 2, case
        assert err.startswith(f"skbnngp compare: error: {message}"), (case, err)
        assert err.count("\n") == 1 and "Traceback" not in err, case
        assert out == "", case
    assert not (tmp_path / "o").exists()  # rejected before any work
    status, _, err = _run([])
    assert status == 2 and err == "skbnngp: error: a command is required: compare " \
                                  "(see skbnngp --help)\n"


def test_console_entry_point_exit_status(tmp_path):
    """``python -m skbnngp``: the real process prints one line and exits with status 2."""
    proc = subprocess.run(
        [sys.executable, "-m", "skbnngp", "compare", "--csv", str(tmp_path / "missing.csv"),
         "--target", "y"], capture_output=True, text=True, timeout=120,
        cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"skbnngp compare: error: CSV file {str(tmp_path / 'missing.csv')!r} not found"]
    assert proc.stdout == ""


def test_format_table():
    summary = {"A": {"n_folds": 2, **{m.key: {"mean": 1.23456, "std": 0.1}
                                      for m in _common.REGRESSION_METRICS}},
               "B": {"n_folds": 0, **{m.key: {"mean": None, "std": None}
                                      for m in _common.REGRESSION_METRICS}}}
    md = _report.format_table(summary, "regression", markdown=True).splitlines()
    assert md[0] == ("| estimator | RMSE | NLPD | CRPS | cov 90% | cov 95% | width 95% | "
                     "cal. err | fit s | predict s |")
    assert md[2].startswith("| `A` | 1.23 ± 0.10 | 1.23 ± 0.10 | 1.23 ± 0.10 | 1.235 ± 0.100 |")
    assert md[3] == "| `B` | " + " | ".join(["failed"] * 9) + " |"
    text = _report.format_table(summary, "regression").splitlines()
    assert len({len(line.rstrip()) for line in text[:2]}) == 1 and "1.23±0.10" in text[2]


def test_format_table_keeps_digits_of_targets_in_millionths_and_billions():
    """A target in millionths printed every y-unit column as 0.000 ± 0.000, one in billions
    as long integers: those columns switch to scientific notation; NLPD, coverage and
    times keep their fixed decimals."""
    def summary(scale):
        return {"A": {"n_folds": 3, **{m.key: {"mean": 1.23456 * (
            scale if m.key in ("rmse", "mae", "crps", "width_90", "width_95") else 1.0),
            "std": 0.1 * scale} for m in _common.REGRESSION_METRICS}}}
    tiny = _report.format_table(summary(1e-7), "regression", markdown=True).splitlines()[2]
    assert tiny.startswith("| `A` | 1.23e-07 ± 1.0e-08 | 1.23 ± 0.00 | 1.23e-07 ± 1.0e-08 "
                           "| 1.235 ± 0.000 |")
    huge = _report.format_table(summary(1e11), "regression").splitlines()[2]
    assert "1.23e+11±1.0e+10" in huge and "1234560" not in huge
    plain = _report.format_table(summary(1.0), "regression", markdown=True).splitlines()[2]
    assert plain.startswith("| `A` | 1.23 ± 0.10 | 1.23 ± 0.10 | 1.23 ± 0.10 |")


def test_rmse_and_fold_std_of_huge_targets_are_finite():
    """Squares of errors beyond 1e154 overflowed: the table showed RMSE ``inf ± nan``."""
    from scipy import stats

    from skbnngp.compare import _run

    rng = np.random.default_rng(0)
    y, mean = rng.normal(size=50), rng.normal(size=50)
    small, _ = _run._score_regression(y, stats.norm(mean, 1.0))
    big, _ = _run._score_regression(1e300 * y, stats.norm(1e300 * mean, 1e300))
    assert np.isfinite(big["rmse"])
    np.testing.assert_allclose(big["rmse"], 1e300 * small["rmse"], rtol=1e-12)
    np.testing.assert_allclose(small["rmse"], np.sqrt(np.mean((mean - y) ** 2)), rtol=1e-12)
    records = [{"estimator": "A", "error": None, "metrics": {
        "fit_s": 1.0, "predict_s": 0.1,
        **{k: v * 1e300 ** (k == "rmse") for k, v in small.items()}}} for _ in range(2)]
    records[1]["metrics"]["rmse"] *= 3
    entry = _run._summarise(records, ["A"], "regression")["A"]
    np.testing.assert_allclose(entry["rmse"]["std"], 1e300 * small["rmse"], rtol=1e-12)


def test_help_is_fast_and_loads_neither_torch_nor_sklearn():
    """``skbnngp --help`` answers without importing the heavy libraries (it took 4 s)."""
    code = ("import sys, io, contextlib\n"
            "from skbnngp.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n        main(['--help'])\n    except SystemExit:\n        pass\n"
            "print(sorted(m for m in ('torch', 'sklearn', 'scipy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"


def test_time_budget_subsamples_a_slow_model_and_says_so(tmp_path):
    """A model whose estimated fit time exceeds its share of --time-budget is trained on a
    random subset of the rows; the report says so and the model stays in the table."""
    status, out, err = _run(["compare", "concrete", "-e", "gpr", "--folds", "2", "--quiet",
                             "--n-jobs", "1", "--time-budget", "0.01", "-o", str(tmp_path)])
    assert status == 0, err
    report = json.loads((tmp_path / "report.json").read_text())
    rows = report["subsampled"]["GaussianProcessRegressor"]
    assert 50 <= rows < 515
    assert all(r["n_train"] == rows and r["n_train_available"] > rows
               for r in report["fold_results"])
    assert "trained on a random" in out and "GaussianProcessRegressor" in out
    # no budget: every row
    status, out, _ = _run(["compare", "concrete", "-e", "gpr", "--folds", "2", "--quiet",
                           "--n-jobs", "1", "--time-budget", "0", "--max-samples", "300",
                           "-o", str(tmp_path / "b")])
    report = json.loads((tmp_path / "b" / "report.json").read_text())
    assert status == 0 and report["subsampled"] == {}
    assert all(r["n_train"] == r["n_train_available"] for r in report["fold_results"])
