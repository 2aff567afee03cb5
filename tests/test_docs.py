"""The documentation builds with ``sphinx -W`` (every warning an error), without running the
gallery; skipped when sphinx and its extensions are not installed."""

import subprocess
import sys
from pathlib import Path

import pytest

for mod in ("sphinx", "numpydoc", "sphinx_gallery", "pydata_sphinx_theme"):
    pytest.importorskip(mod)

DOC = Path(__file__).resolve().parents[1] / "doc"


def test_docs_build_without_warnings(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going", "-q",
         "-D", "plot_gallery=0", "-d", str(tmp_path / "doctrees"), str(DOC),
         str(tmp_path / "html")],
        capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (tmp_path / "html" / "index.html").exists()
