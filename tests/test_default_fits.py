"""A default fit of every public estimator raises no warning (issue 48 item 5; it was the
script ``benchmarks/check_default_fits.py``).

Every estimator from ``all_estimators`` is fitted at its defaults (``random_state=0``,
``device="cpu"``) as ``Pipeline([StandardScaler(), estimator])`` on every row of the
embedded regression sets but concrete (the regressors; concrete is the compare job's) or of
the smallest bundled classification set (the classifiers), to keep the suite's time, with
every warning turned into an error. A
convergence warning, a jitter warning or a calibration warning at the defaults is a defect
of the defaults.
"""

import warnings

import numpy as np
import pytest
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from skbnngp.datasets import load_dataset
from skbnngp.utils import all_estimators

REGRESSION_SETS = ("auto_mpg", "cpu_performance")
CLASSIFICATION_SETS = ("iris",)


def _cases():
    for name, Est in all_estimators():
        sets = CLASSIFICATION_SETS if "Classifier" in name else REGRESSION_SETS
        for data in sets:
            yield pytest.param(Est, data, id=f"{name}-{data}")


@pytest.mark.parametrize("Est, data", list(_cases()))
def test_a_default_fit_raises_no_warning(Est, data):
    X, y = load_dataset(data, return_X_y=True)
    pipe = make_pipeline(StandardScaler(), Est(random_state=0, device="cpu"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # third-party deprecations inside torch are not the package's defaults
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.filterwarnings("ignore", category=FutureWarning, module="torch")
        pipe.fit(X, y)
        score = pipe.score(X, y)
    # a sanity bound, not a benchmark: every default fits its training rows well
    assert np.isfinite(score) and score > (0.9 if "Classifier" in Est.__name__ else 0.75)
