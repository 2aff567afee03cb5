"""The README is what a newcomer runs first: its commands are the ones CI runs, its Python
blocks run as written and print finite numbers, and it stays short and undated (issue 48)."""

import contextlib
import io
import re
import warnings
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
PYTHON_BLOCKS = re.findall(r"```python\n(.*?)```", README, re.DOTALL)


def test_the_two_commands_are_the_ones_ci_and_a_fresh_machine_run():
    bash = re.findall(r"```bash\n(.*?)```", README, re.DOTALL)
    commands = [line.strip() for block in bash for line in block.splitlines()
                if line.strip() and not line.strip().startswith("#")]
    assert "bash scripts/install.sh examples && python3 -m skbnngp compare" in commands
    assert "bash scripts/test.sh" in commands
    assert "bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "pytest" in (ROOT / "scripts" / "test.sh").read_text(encoding="utf-8")


def test_the_readme_is_short_and_dated_once():
    assert len(README.splitlines()) < 200
    dates = re.findall(r"20\d\d-\d\d-\d\d", README)
    assert len(dates) == 1, dates
    assert "RESULTS_TABLE" not in README


@pytest.mark.parametrize("index", range(len(PYTHON_BLOCKS)))
def test_a_python_block_runs_and_prints_finite_numbers(index):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), warnings.catch_warnings():
        warnings.simplefilter("error")  # a quick start that warns misleads its reader
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        # the README's own code, run as its reader would run it
        exec(compile(PYTHON_BLOCKS[index], f"README block {index}", "exec"), {})  # noqa: S102
    text = out.getvalue()
    numbers = [float(x) for x in re.findall(r"-?\d+\.\d+(?:e[-+]?\d+)?", text)]
    assert numbers, text
    assert np.all(np.isfinite(numbers)) and "nan" not in text and "inf" not in text, text
