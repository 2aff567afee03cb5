"""StudentTProcessClassifier's default noise bound (issue 20, item 4): the absolute
``alpha`` bound must leave room for the kernel amplitude the evidence fit reaches."""

import warnings

import pytest
import torch
from sklearn.datasets import load_iris
from sklearn.exceptions import ConvergenceWarning
from sklearn.preprocessing import StandardScaler

from skbnngp import StudentTProcessClassifier
from skbnngp._student_t import _unpack


@pytest.fixture(scope="module")
def iris():
    X, y = load_iris(return_X_y=True)
    return StandardScaler().fit_transform(X), y


def test_default_fit_on_iris_ends_inside_its_bounds_and_is_clean(iris):
    X, y = iris
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        clf = StudentTProcessClassifier(random_state=0, device="cpu").fit(X, y)
    lo, hi = clf.alpha_bounds
    alpha = clf.regressor_.hyperparameters_["alpha"]
    assert lo * 1.01 < alpha < hi / 1.01
    # the noise ratio to the kernel's mean diagonal is ordinary; only the absolute value is
    # large, because the amplitude is traded against the scale s
    reg = clf.regressor_
    with torch.no_grad():
        diag = reg._engine.kernel(_unpack(reg._theta), reg._engine.X).diagonal()
    assert float(diag.mean()) > 10  # the old absolute upper bound
    assert 1e-3 < alpha / float(diag.mean()) < 0.5


def test_the_old_upper_bound_is_hit_on_iris_and_warns(iris):
    # the regressor's default box (upper 10) is where the leave-one-out choice ended before
    X, y = iris
    with pytest.warns(ConvergenceWarning, match=r"alpha=10 \(upper bound\)"):
        StudentTProcessClassifier(alpha_bounds=(1e-6, 10.0), random_state=0,
                                  device="cpu").fit(X, y)
