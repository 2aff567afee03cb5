"""``skbnngp compare -o DIR`` checks DIR before any fit (issue 18, item 7)."""

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
