"""Issue 12 reproducers for input scaling: tiny-range, near-constant and huge columns."""

import numpy as np
import pytest

from skbnngp._base import input_scaling
from skbnngp.utils import all_estimators

from .conftest import FAST

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


@pytest.mark.parametrize("method", ["standard", "minmax_center", "minmax_half"])
def test_input_scaling_handles_tiny_constant_and_huge_columns(method):
    rng = np.random.default_rng(0)
    n = 50
    X = np.column_stack([
        rng.normal(size=n) * 1e-200,                 # tiny but real variation: scaled
        1.0 + rng.normal(size=n) * 1e-17,            # constant up to round-off: centred only
        rng.normal(size=n) * 1e300,                  # squares would overflow
        np.full(n, 7.0),                             # constant
    ])
    off, scale = input_scaling(X, method)
    assert np.all(np.isfinite(off)) and np.all(np.isfinite(scale)) and np.all(scale > 0)
    Z = (X - off) / scale
    assert np.all(np.isfinite(Z))
    assert 0.1 < np.abs(Z[:, 0]).max() < 10  # the tiny column keeps its variation
    assert scale[1] == 1.0 and scale[3] == 1.0
    assert np.abs(Z[:, 1]).max() < 1e-12 and np.all(Z[:, 3] == 0)
    assert 0.1 < np.abs(Z[:, 2]).max() < 10
    off0, sc0 = input_scaling(X, method, enabled=False)
    assert np.all(off0 == 0) and np.all(sc0 == 1)


@pytest.mark.parametrize("name, Est", all_estimators())
def test_tiny_range_and_near_constant_columns_fit_and_predict_finite(name, Est):
    """A column whose range is 1e-200 turned into NaN in the mixed-activation GP's min-max
    scaling; every estimator must now fit and predict finite values."""
    rng = np.random.default_rng(1)
    X = np.column_stack([rng.normal(size=40), rng.normal(size=40) * 1e-200,
                         np.full(40, 3.0) + rng.normal(size=40) * 1e-16])
    y = X[:, 0] + 0.1 * rng.normal(size=40)
    if name.endswith("Classifier"):
        y = (y > 0).astype(int)
    est = Est(**FAST.get(name, {}), random_state=0).fit(X, y)
    out = est.predict_proba(X) if hasattr(est, "predict_proba") else \
        np.column_stack(est.predict(X, return_std=True))
    assert np.all(np.isfinite(out))


@pytest.mark.parametrize("name, Est", all_estimators())
@pytest.mark.parametrize("scale", [1e150, 1e300])
def test_huge_finite_input_at_predict_raises_or_is_finite(name, Est, scale):
    """Issue 12 reproducer: huge but finite X at predict time gave NaN silently (and the
    classifier's predict still returned a class). Every public prediction method must now
    return finite values or raise a ValueError naming X."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(40, 2))
    y = X[:, 0] - X[:, 1]
    classifier = name.endswith("Classifier")
    if classifier:
        y = (y > 0).astype(int)
    est = Est(**FAST.get(name, {}), random_state=0).fit(X, y)
    Xh = X[:5] * scale
    methods = ["predict"] + (["predict_proba", "decision_function"] if classifier else [])
    if hasattr(est, "ood_score"):
        methods.append("ood_score")
    for method in methods:
        try:
            out = getattr(est, method)(Xh)
        except ValueError as exc:
            assert "X" in str(exc), (method, str(exc))
            continue
        if method == "predict" and classifier:
            P = est.predict_proba(Xh)  # reached only when predict_proba is finite too
            np.testing.assert_array_equal(out, est.classes_[P.argmax(1)])
        else:
            assert np.all(np.isfinite(out)), method
    if not classifier:
        try:
            mean, std = est.predict(Xh, return_std=True)
        except ValueError as exc:
            assert "X" in str(exc)
        else:
            assert np.all(np.isfinite(mean)) and np.all(np.isfinite(std) | (std == np.inf))


@pytest.mark.parametrize("name, Est", all_estimators())
def test_messages_name_the_argument_and_print_plain_numbers(name, Est):
    """Issue 13: a string y given to a regressor ended in a NumPy add.reduce error, and
    messages printed ``np.int64(0)``."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(20, 2))
    Xs = X.astype(str)
    Xs[0, 0] = "a"
    with pytest.raises(ValueError, match=r"X must be numeric, but it holds 'a'"):
        Est(**FAST.get(name, {})).fit(Xs, np.arange(20) % 2)
    if name.endswith("Classifier"):
        with pytest.raises(ValueError, match="class") as info:
            Est(**FAST.get(name, {})).fit(X, np.zeros(20, dtype=np.int64))
    else:
        with pytest.raises(ValueError, match=r"y must be numeric, but it holds 'b'. For class "
                                             r"labels use a classifier") as info:
            Est(**FAST.get(name, {})).fit(X, np.array(["b", "c"] * 10))
    assert "np." not in str(info.value)


@pytest.mark.parametrize("name, Est", all_estimators())
def test_dates_and_durations_are_refused_naming_the_argument(name, Est):
    """A datetime column beside numbers ended in NumPy's DTypePromotionError, which names
    no argument, and a datetime array alone was cast to nanoseconds silently; both are
    refused at fit and at predict, naming X (and its column) or y."""
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(3)
    X = rng.normal(size=(20, 2))
    y = np.arange(20) % 2
    dates = pd.DataFrame({"a": X[:, 0], "when": pd.date_range("2020-01-01", periods=20)})
    with pytest.raises(TypeError, match=r"X must be numeric, but it holds datetime64.*'when'"):
        Est(**FAST.get(name, {})).fit(dates, y)
    with pytest.raises(TypeError, match="X must be numeric, but it holds timedelta64"):
        Est(**FAST.get(name, {})).fit(np.arange(40).reshape(20, 2) * np.timedelta64(1, "s"), y)
    est = Est(**FAST.get(name, {})).fit(X, y)
    with pytest.raises(TypeError, match="X must be numeric, but it holds datetime64"):
        est.predict(np.datetime64("2020-01-01") + np.arange(4).reshape(2, 2))
    if not name.endswith("Classifier"):
        with pytest.raises(TypeError, match="y must be numeric, but it holds timedelta64"):
            Est(**FAST.get(name, {})).fit(X, y * np.timedelta64(1, "s"))


def test_classifier_predict_agrees_with_proba_on_tied_inputs():
    """Fuzz reproducer: 4 identical rows with 4 different labels gave tied probabilities, and
    the STP classifier's predict broke the tie by round-off in the posterior mean (class 2)
    while argmax of predict_proba gave class 0."""
    from skbnngp import StudentTProcessClassifier
    X = np.zeros((4, 7), dtype=np.int64)
    y = np.array([2, 3, 1, 0])
    clf = StudentTProcessClassifier(max_iter=3, device="cpu", random_state=0).fit(X, y)
    P = clf.predict_proba(X)
    np.testing.assert_array_equal(clf.predict(X), clf.classes_[P.argmax(1)])


@pytest.mark.parametrize("name", ["DBKRegressor", "RichBLLRegressor"])
def test_network_regressors_warn_of_a_binary_column_with_a_rare_value(name):
    """A flag set on a handful of rows lets a trained network fit those rows and carry a
    spurious effect to every new input with the flag (user guide, rare categories): the fit
    warns, naming the column and its count. Not for a common value, a column of three
    values, a flag on 20 rows, or rare rows of weight zero (dropped)."""
    import warnings

    Est = dict(all_estimators())[name]
    rng = np.random.default_rng(0)
    n = 300
    base = rng.normal(size=(n, 2))
    y = base[:, 0]
    flag = np.zeros(n)
    flag[:4] = 1.0

    def messages(X, **fit):
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            Est(**FAST.get(name, {})).fit(X, y, **fit)
        return [str(r.message) for r in rec if "two values" in str(r.message)]

    found = messages(np.c_[base, flag])
    assert len(found) == 1 and "column(s) 2 (4 rows)" in found[0]
    three = flag.copy()
    three[4:150] = 2.0
    common = (rng.random(n) < 0.5).astype(float)
    twenty = np.zeros(n)
    twenty[:20] = 1.0
    for X in (np.c_[base, common], np.c_[base, three], np.c_[base, twenty]):
        assert messages(X) == []
    w = np.ones(n)
    w[:4] = 0.0
    assert messages(np.c_[base, flag], sample_weight=w) == []
