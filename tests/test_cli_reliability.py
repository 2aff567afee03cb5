"""``skbnngp compare -o DIR`` checks DIR before any fit, and a Ctrl-C during the folds
leaves a report of what finished, marked incomplete (issue 18, item 7)."""

import io
import os
import stat
import sys

import pytest

from skbnngp.cli import main
from skbnngp.compare import _run as compare_run


def _run(argv):
    out, err = io.StringIO(), io.StringIO()
    return main(argv, stdout=out, stderr=err), out.getvalue(), err.getvalue()


@pytest.fixture
def no_fit(monkeypatch):
    """Fail the test if any fit (or pilot) starts."""
    def boom(*a, **k):
        raise AssertionError("a fit ran before the output directory was checked")
    monkeypatch.setattr(compare_run, "_run_one", boom)
    monkeypatch.setattr(compare_run, "_pilot_time", boom)


def _sigint_child_env():
    """Environment of a ``compare`` child that a test interrupts: one thread, this checkout
    first on the path (skips on Windows, where SIGINT cannot be sent to a child)."""
    if sys.platform == "win32":
        pytest.skip("SIGINT to a child process is POSIX")
    return dict(os.environ, OMP_NUM_THREADS="1",
                PYTHONPATH=os.pathsep.join(filter(None, [
                    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    os.environ.get("PYTHONPATH")])))


ARGS = ["compare", "iris", "-e", "gpc", "--folds", "2", "--n-jobs", "1", "-q"]


@pytest.mark.parametrize("name", compare_run.OUTPUT_FILES)
def test_a_directory_named_like_a_report_is_refused_before_any_fit(tmp_path, no_fit, name):
    (tmp_path / name).mkdir()
    status, out, err = _run(ARGS + ["-o", str(tmp_path)])
    assert status == 2 and out == ""
    assert err.startswith("skbnngp compare: error: cannot write") and "is a directory" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.skipif(sys.platform == "win32" or os.geteuid() == 0,
                    reason="permissions do not bind root")
def test_an_unwritable_directory_is_refused_before_any_fit(tmp_path, no_fit):
    tmp_path.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        status, _, err = _run(ARGS + ["-o", str(tmp_path)])
    finally:
        tmp_path.chmod(stat.S_IRWXU)
    assert status == 2 and "cannot write into output directory" in err


def test_unwritable_directory_check_without_permissions(tmp_path, no_fit, monkeypatch):
    """The same check where permissions do not bind (root): the probe file cannot be made."""
    import tempfile

    def refuse(*a, **k):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(tempfile, "TemporaryFile", refuse)
    status, out, err = _run(ARGS + ["-o", str(tmp_path)])
    assert status == 2 and out == ""
    assert err == (f"skbnngp compare: error: cannot write into output directory "
                   f"{str(tmp_path)!r}: Permission denied\n")


def test_a_file_in_place_of_the_directory_is_refused(tmp_path, no_fit):
    target = tmp_path / "taken"
    target.write_text("x")
    status, _, err = _run(ARGS + ["-o", str(target)])
    assert status == 2 and "error: cannot create output directory" in err
    assert "Traceback" not in err


# ---------------------------------------------------------------- Ctrl-C during the folds
_SLOW_FIT = r"""
import signal, sys, time
# Ctrl-C raises KeyboardInterrupt, as in a terminal, even when this test run was started
# in the background with SIGINT ignored (which a child inherits)
signal.signal(signal.SIGINT, signal.default_int_handler)
from skbnngp.compare import _run
from skbnngp.cli import main

real = _run._run_one

def run_one(name, fold, *args, **kwargs):
    if name == "StudentTProcessClassifier" and fold == 0:
        time.sleep(600)  # the slow fit that the user gives up on
    return real(name, fold, *args, **kwargs)

_run._run_one = run_one
sys.exit(main(sys.argv[1:]))
"""


def test_ctrl_c_during_the_folds_writes_an_incomplete_report_and_exits_130(tmp_path):
    """A real SIGINT during the second fit (the first has finished): exit 130, one line, no
    traceback, and report.md/report.json say INCOMPLETE and which folds of which model
    finished; the model with no finished fold reads "not run", not "failed"."""
    import json
    import signal
    import subprocess
    import time

    env = _sigint_child_env()
    err_path = tmp_path / "stderr.txt"
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (out_dir / "calibration.png").write_bytes(b"stale")  # an earlier run's figure
    with open(err_path, "w") as err_file:
        # n_jobs=1 runs gpc fold 1, stp fold 1 (sleeps), gpc fold 2, stp fold 2
        proc = subprocess.Popen(
            [sys.executable, "-c", _SLOW_FIT, "compare", "iris", "-e", "gpc", "stp",
             "--folds", "2", "--n-jobs", "1", "--time-budget", "0", "--max-iter", "5",
             "-o", str(out_dir)],
            stdout=subprocess.PIPE, stderr=err_file, text=True, env=env)
        deadline = time.monotonic() + 240  # imports took 15 s at load 7, more in a full suite
        try:
            while "1/4 fits" not in err_path.read_text():  # progress: one line per fit
                assert proc.poll() is None, err_path.read_text()
                assert time.monotonic() < deadline, err_path.read_text()
                time.sleep(0.1)
            time.sleep(0.3)  # inside the slow fit
            proc.send_signal(signal.SIGINT)
            stdout, _ = proc.communicate(timeout=180)  # a loaded machine is slow to write
        finally:
            if proc.poll() is None:
                proc.kill()
    err = err_path.read_text()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and stdout == ""
    assert err.strip().splitlines()[-1] == (
        "skbnngp compare: interrupted after 1 of 4 fits (folds done: GaussianProcessClassifier "
        f"1/2; StudentTProcessClassifier 0/2); INCOMPLETE report: {out_dir / 'report.md'}")
    report = json.loads((out_dir / "report.json").read_text())
    assert report["incomplete"] == {
        "finished": {"GaussianProcessClassifier": [1], "StudentTProcessClassifier": []},
        "not_finished": {"GaussianProcessClassifier": [2], "StudentTProcessClassifier": [1, 2]},
        "fits_done": 1, "fits_planned": 4}
    assert report["summary"]["GaussianProcessClassifier"]["n_folds"] == 1
    assert report["summary"]["StudentTProcessClassifier"]["n_folds"] == 0
    [record] = report["fold_results"]
    assert (record["estimator"], record["fold"], record["error"]) == (
        "GaussianProcessClassifier", 0, None)
    assert 0.5 <= record["metrics"]["accuracy"] <= 1
    md = (out_dir / "report.md").read_text()
    assert md.splitlines()[0].endswith("— INCOMPLETE")
    assert "**INCOMPLETE**: interrupted (Ctrl-C) after 1 of 4 fits" in md
    assert "- `GaussianProcessClassifier`: folds finished: 1; not run or not finished: 2" in md
    assert ("- `StudentTProcessClassifier`: folds finished: none; not run or not finished: "
            "all 2") in md
    assert "| `StudentTProcessClassifier` | not run |" in md
    assert not (out_dir / "calibration.png").exists()  # the stale figure is not passed off


_SLOW_PILOT = r"""
import signal, sys, time
# Ctrl-C raises KeyboardInterrupt, as in a terminal, even when this test run was started
# in the background with SIGINT ignored (which a child inherits)
signal.signal(signal.SIGINT, signal.default_int_handler)
from skbnngp.compare import _run
from skbnngp.cli import main

def pilot_time(*args, **kwargs):
    sys.stderr.write("pilot started\n")
    sys.stderr.flush()
    time.sleep(600)  # a pilot fit the user gives up on

_run._pilot_time = pilot_time
sys.exit(main(sys.argv[1:]))
"""


def test_ctrl_c_during_the_pilot_fits_writes_an_empty_incomplete_report(tmp_path):
    """A real SIGINT while --time-budget times its pilot fits: no fold is fitted after it,
    exit 130 without a traceback, and the report says INCOMPLETE with every model not run."""
    import json
    import signal
    import subprocess
    import time

    env = _sigint_child_env()
    err_path = tmp_path / "stderr.txt"
    out_dir = tmp_path / "out"
    with open(err_path, "w") as err_file:
        proc = subprocess.Popen(
            [sys.executable, "-c", _SLOW_PILOT, "compare", "concrete", "-e", "gpr", "stp",
             "--folds", "2", "--n-jobs", "1", "--time-budget", "60", "-o", str(out_dir)],
            stdout=subprocess.PIPE, stderr=err_file, text=True, env=env)
        deadline = time.monotonic() + 240
        try:
            while "pilot started" not in err_path.read_text():
                assert proc.poll() is None, err_path.read_text()
                assert time.monotonic() < deadline, err_path.read_text()
                time.sleep(0.1)
            proc.send_signal(signal.SIGINT)
            stdout, _ = proc.communicate(timeout=180)  # a loaded machine is slow to write
        finally:
            if proc.poll() is None:
                proc.kill()
    err = err_path.read_text()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and stdout == ""
    assert err.strip().splitlines()[-1].startswith(
        "skbnngp compare: interrupted after 0 of 4 fits")
    report = json.loads((out_dir / "report.json").read_text())
    assert report["incomplete"]["fits_done"] == 0
    assert report["fold_results"] == []
    md = (out_dir / "report.md").read_text()
    assert md.splitlines()[0].endswith("— INCOMPLETE")
    assert "| `StudentTProcessRegressor` | not run |" in md


def test_an_interrupted_model_with_no_finished_fold_reads_not_run():
    from skbnngp.compare._report import format_table

    stat = {"mean": None, "std": None}
    entry = {"n_folds": 0, "n_failed": 0, **{k: stat for k in
                                             ("accuracy", "nll", "ece", "fit_s", "predict_s")}}
    table = format_table({"A": entry, "B": dict(entry, n_failed=2)}, "classification")
    assert table.splitlines()[2].split()[1] == "not" and "failed" in table.splitlines()[3]


# ------------------------------------------------------------------ CSV reading and the task
def _csv(path, header, rows):
    path.write_text(header + "\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return str(path)


def test_rows_with_one_field_more_than_the_header_are_refused(tmp_path, no_fit):
    """Issue 53 item 2: pandas made the first column the index and every column shifted, so
    another column was scored as the target, with exit 0."""
    rows = [f"{i},{i % 3}.5,{i * 0.1:.1f},{i % 2}" for i in range(40)]
    status, out, err = _run(["compare", "--csv", _csv(tmp_path / "d.csv", "a,b,y", rows),
                             "--target", "y", "-o", str(tmp_path / "out"), "-q"])
    assert status == 2 and out == ""
    assert "line 2: 4 fields, expected 3 as in the header" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_text_class_with_one_row_is_a_usage_error(tmp_path, no_fit):
    """Issue 53 item 5: 'str' object has no attribute 'item' at the rare-class check."""
    rows = [f"{i * 0.1:.1f},{(i * 7) % 5},{'ab'[i % 2]}" for i in range(40)] + ["0.5,1,c"]
    status, _, err = _run(["compare", "--csv", _csv(tmp_path / "d.csv", "a,b,y", rows),
                           "--target", "y", "-o", str(tmp_path / "out"), "-q"])
    assert status == 2 and "class 'c' has only 1 rows" in err and "Traceback" not in err


@pytest.mark.parametrize("value, task", [("3.0", []), ("3.0", ["--task", "regression"]),
                                         ("k", [])])
def test_a_constant_target_is_a_usage_error(tmp_path, no_fit, value, task):
    """A constant numeric target was read as one integer class ("has a single class"), and
    with --task regression every model was scored on predicting a constant."""
    rows = [f"{i * 0.1:.1f},{value}" for i in range(40)]
    status, out, err = _run(["compare", "--csv", _csv(tmp_path / "d.csv", "a,y", rows),
                             "--target", "y", "-o", str(tmp_path / "out"), "-q", *task])
    assert status == 2 and out == ""
    assert "target 'y' is constant (every row is" in err and "Traceback" not in err


def test_a_code_column_beside_dot_decimals_is_not_reread_as_decimal_commas(tmp_path, no_fit):
    """Issue 53 item 5: the decimal-comma re-read turned the dot decimals into text and the
    error report crashed (IndexError)."""
    rows = [f"{i * 0.25:.2f};1,5;{i * 0.5:.2f}" for i in range(30)]
    status, _, err = _run(["compare", "--csv", _csv(tmp_path / "d.csv", "a;code;y", rows),
                           "--target", "y", "-o", str(tmp_path / "out"), "-q"])
    assert status == 2 and "feature column 'code' is not numeric ('1,5' on line 2)" in err
    assert "Traceback" not in err


def test_a_zero_one_target_runs_the_classification_table(tmp_path):
    """Issue 47 item 4: a 0/1 integer target was cross-validated as a regression (RMSE,
    NLPD) without a hint; sklearn's type_of_target calls it binary."""
    rng = __import__("numpy").random.default_rng(0)
    X = rng.normal(size=(60, 2))
    rows = [f"{a:.3f},{b:.3f},{int(a + b > 0)}" for a, b in X]
    path = _csv(tmp_path / "d.csv", "a,b,y", rows)
    status, out, _ = _run(["compare", "--csv", path, "--target", "y", "-e", "gpc",
                           "--folds", "3", "--time-budget", "0", "-o", str(tmp_path / "o"), "-q"])
    assert status == 0 and "accuracy" in out and "RMSE" not in out
    assert "target has 2 integer values: read as class labels" in out
    status, out, _ = _run(["compare", "--csv", path, "--target", "y", "-e", "gpr",
                           "--task", "regression", "--folds", "3", "--time-budget", "0",
                           "-o", str(tmp_path / "r"), "-q"])
    assert status == 0 and "RMSE" in out


def test_a_run_over_its_budget_says_by_how_much(tmp_path):
    """Issue 47 item 4: a small-data run overran --time-budget without a word."""
    import json

    status, out, _ = _run(["compare", "iris", "-e", "gpc", "--folds", "2", "--n-jobs", "1",
                           "--time-budget", "0.001", "-o", str(tmp_path), "-q"])
    report = json.loads((tmp_path / "report.json").read_text())
    assert status == 0 and report["budget_overrun_seconds"] > 0
    assert "over --time-budget 0 s" in out


def test_a_full_disk_leaves_the_earlier_report_whole(tmp_path, monkeypatch):
    """Issue 53 item 5: a full disk left report.json at 0 bytes over an earlier one and
    printed no table."""
    import errno
    from pathlib import Path

    args = ["compare", "iris", "-e", "gpc", "--folds", "2", "--n-jobs", "1",
            "--time-budget", "0", "-o", str(tmp_path), "-q"]
    assert _run(args)[0] == 0
    before = (tmp_path / "report.json").read_bytes()
    real = Path.write_text

    def full(self, *a, **k):
        if self.name.endswith(".tmp"):
            real(self, "", encoding="utf-8")  # the disk filled after the file was created
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, *a, **k)
    monkeypatch.setattr(Path, "write_text", full)
    status, out, err = _run(args)
    assert status == 2 and "accuracy" in out  # the table is printed before the write
    assert "No space left on device" in err and "Traceback" not in err
    assert (tmp_path / "report.json").read_bytes() == before
    assert not list(tmp_path.glob("*.tmp"))
