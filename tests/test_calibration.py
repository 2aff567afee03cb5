"""The shared calibration layer (``skbnngp._calibration``, the regressors' ``calibration``):
properties that hold for every regressor that calibrates on leave-one-out residuals."""

import warnings

import numpy as np
import pytest

from skbnngp import (
    DBKRegressor,
    MixedActivationGPRegressor,
    RichBLLRegressor,
    StudentTProcessRegressor,
)
from skbnngp._rows import held_out_split
from skbnngp.exceptions import HeavyTailWarning

GP_REGRESSORS = [StudentTProcessRegressor, MixedActivationGPRegressor]
HELD_OUT = [RichBLLRegressor, DBKRegressor]


def _coverage(model, X, y, level=0.95):
    lo, hi = model.predict_dist(X).interval(level)
    return float(np.mean((y >= lo) & (y <= hi)))


def _smooth(d, n, seed):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, d))
    if d == 1:
        return X, np.sin(3 * X[:, 0]) + 0.5 * X[:, 0]
    return X, np.sin(X[:, 0]) + X[:, 1] * X[:, 2] + np.cos(X[:, 3]) - 0.5 * X[:, 4] ** 2


@pytest.mark.parametrize("Est", GP_REGRESSORS + HELD_OUT)
@pytest.mark.parametrize("d, n", [(1, 20), (1, 200), (5, 50)])
def test_noiseless_smooth_targets_get_a_finite_std_and_cover(Est, d, n):
    """Issue 47 item 2: a smooth deterministic function got a Cauchy predictive (df 1,
    infinite std). Its predictive now has a variance, and its 95 % intervals cover a dense
    test grid within 0.85-1.0."""
    X, y = _smooth(d, n, seed=0)
    Xg, yg = _smooth(d, 1000, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", HeavyTailWarning)
        model = Est(random_state=0).fit(X, y)
        _, std = model.predict(Xg, return_std=True)
    assert model.predictive_df_ > 2 and np.all(np.isfinite(std))
    np.testing.assert_allclose(std, model.predict_dist(Xg).std(), rtol=1e-10)
    assert 0.85 <= _coverage(model, Xg, yg) <= 1.0


def test_a_predictive_without_variance_warns_and_points_to_intervals():
    """Heavy-tailed noise keeps its heavy tails (df <= 2); then return_std is inf, as the
    predictive's own std is, and says so once per call with the way out."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_t(2, size=200)
    reg = StudentTProcessRegressor(random_state=0).fit(X, y)
    assert reg.predictive_df_ <= 2
    with pytest.warns(HeavyTailWarning, match=r"predict_dist\(X\)\.interval"):
        _, std = reg.predict(X[:3], return_std=True)
    assert np.all(np.isinf(std)) and np.all(np.isinf(reg.predict_dist(X[:3]).std()))
    lo, hi = reg.predict_dist(X[:3]).interval(0.9)
    assert np.all(np.isfinite(lo) & np.isfinite(hi) & (lo < hi))


@pytest.mark.parametrize("Est", GP_REGRESSORS + HELD_OUT)
def test_duplicated_rows_keep_the_coverage(Est):
    """Issue 53 item 1: trained on every row twice (or 70 % of them), the leave-one-out
    residuals vanished (a twin predicts its row) and the intervals collapsed (coverage 0.00).
    Rows of one input are now left out together: coverage within 0.05 of the
    de-duplicated fit, and return_std agrees with predict_dist."""
    rng = np.random.default_rng(0)
    f = lambda X: np.sin(X[:, 0]) + X[:, 1]  # noqa: E731
    X = rng.normal(size=(150, 3))
    y = f(X) + 0.3 * rng.standard_normal(150)
    Xt = rng.normal(size=(2000, 3))
    yt = f(Xt) + 0.3 * rng.standard_normal(2000)
    base = _coverage(Est(random_state=0).fit(X, y), Xt, yt)
    for k in (150, 105):
        model = Est(random_state=0).fit(np.r_[X, X[:k]], np.r_[y, y[:k]])
        assert abs(_coverage(model, Xt, yt) - base) <= 0.05
        _, std = model.predict(Xt[:50], return_std=True)
        np.testing.assert_allclose(std, model.predict_dist(Xt[:50]).std(), rtol=1e-10)


def test_held_out_split_groups_repeated_inputs_only_where_most_inputs_are_unique():
    X = np.random.default_rng(0).normal(size=(60, 2))
    plain = held_out_split(None, 60, np.random.RandomState(3), 0.2)
    same = held_out_split(None, 60, np.random.RandomState(3), 0.2, X=X)
    for a, b in zip(plain[:2], same[:2]):  # no repeated inputs: the plain random split
        np.testing.assert_array_equal(a, b)
    assert len(plain[1]) == 12 and held_out_split(None, 60, None, None)[1] is None
    # 50 of 70 rows have an input of their own: the rows of an input stay together
    XX = np.r_[X, X[:10]]
    tr, va, _, _ = held_out_split(None, 70, np.random.RandomState(3), 0.2, X=XX)
    assert np.array_equal(np.sort(np.r_[tr, va]), np.arange(70))
    assert len(va) >= 14 and not set(map(tuple, XX[tr])) & set(map(tuple, XX[va]))
    # five inputs, 20 rows each (a categorical design): rows one by one, every input trained
    XC = np.repeat(np.eye(5), 20, axis=0)
    tr, va, _, _ = held_out_split(None, 100, np.random.RandomState(3), 0.2, X=XC)
    assert len(va) == 20 and set(map(tuple, XC[tr])) == set(map(tuple, XC))


def test_held_out_split_splits_the_copies_of_merged_rows_where_rows_replicate():
    """Integer targets on categories merge into weighted rows; held out whole, a row took
    every copy of its value out of its category's training rows. Where inputs recur the
    copies are split one by one: each copy on exactly one side, a fifth of them held out,
    every input and every merged row of weight >= 5 trained on; a fractional weight stays
    whole, and where most inputs are unique nothing is split (rows given twice)."""
    rng = np.random.default_rng(0)
    X = np.repeat(np.eye(5), 4, axis=0)  # 20 merged rows: 5 inputs x 4 target values
    w = rng.integers(1, 12, size=20).astype(float)
    w[3] = 2.5
    tr, va, wtr, wva = held_out_split(None, 20, np.random.RandomState(1), 0.2, X=X, weights=w)
    train, held = np.zeros(20), np.zeros(20)
    train[tr], held[va] = wtr, wva
    np.testing.assert_array_equal(train + held, w)
    assert np.all(wtr > 0) and np.all(wva > 0) and held[3] in (0.0, 2.5)
    assert held.sum() - held[3] + (held[3] > 0) == np.ceil(0.2 * (w.sum() - 1.5))  # 2.5: a unit
    assert np.all(train[w >= 5] > 0) and set(map(tuple, X[tr])) == set(map(tuple, X))
    assert len(np.intersect1d(tr, va)) > 0  # some rows on both sides
    big = w * 10**8  # aggregated counts: drawn row by row, never listed copy by copy
    big[3] = 2.5
    tr, va, wtr, wva = held_out_split(None, 20, np.random.RandomState(1), 0.2, X=X,
                                      weights=big)
    train, held = np.zeros(20), np.zeros(20)
    train[tr], held[va] = wtr, wva
    np.testing.assert_array_equal(train + held, big)
    assert held.sum() - held[3] + (held[3] > 0) == np.ceil(0.2 * (big.sum() - 1.5))
    assert abs(held / big - 0.2)[big > 1e8].max() < 0.01  # about a fifth of every row
    Xu = np.random.default_rng(1).normal(size=(20, 2))  # unique inputs: whole rows
    tr, va, wtr, wva = held_out_split(None, 20, np.random.RandomState(1), 0.2, X=Xu, weights=w)
    assert len(np.intersect1d(tr, va)) == 0 and len(va) == 4
    np.testing.assert_array_equal(wtr, w[tr])
    np.testing.assert_array_equal(wva, w[va])


@pytest.mark.parametrize("Est", [DBKRegressor, RichBLLRegressor])
def test_the_networks_train_on_every_category_of_a_categorical_design(Est):
    """Five categories, one-hot, 300 rows (exact (x, y) repeats aside, the rows of a
    category share their input). The validation split held out whole inputs, so a whole
    category was never trained on: its mean was predicted 0.26 where its rows average 2.14
    (Rich-BLL), and the calibration on those rows made every interval 3-4 times too wide.
    Every category's mean is now within 0.25 of its rows' (their standard error is about
    0.07) and the 90 % intervals cover fresh rows at about the nominal rate."""
    rng = np.random.default_rng(0)

    def draw(n):
        g = rng.integers(0, 5, n)
        return np.eye(5)[g], np.array([0, 1, 2, -1, 0.5])[g] + 0.5 * rng.normal(size=n), g

    X, y, g = draw(300)
    Xt, yt, _ = draw(3000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = Est(random_state=0).fit(X, y)
    means = np.array([y[g == k].mean() for k in range(5)])
    assert np.max(np.abs(model.predict(np.eye(5)) - means)) < 0.25
    lo, hi = model.predict_interval(Xt, confidence=0.9)
    assert 0.85 <= np.mean((yt >= lo) & (yt <= hi)) <= 0.95
    assert np.mean(hi - lo) < 1.3 * 2 * 1.645 * 0.5


@pytest.mark.parametrize("Est", [DBKRegressor, RichBLLRegressor])
def test_the_networks_learn_every_categorys_mean_from_integer_targets(Est):
    """Poisson counts on five one-hot categories: exact repeats of (x, y) merge into
    weighted rows, and the validation split held such a row out whole, so a category
    trained without every row of some value (DBK's category means were off by up to 3.8,
    Rich-BLL's by 2.2, here). The copies are now split: every category's mean within 0.6
    of its rows' (their standard errors are 0.12-0.37). DBK also warned that its 128 basis
    functions outnumbered "the 41 training rows" (the distinct (x, y) rows of 300)."""
    rng = np.random.default_rng(1)
    g = rng.integers(0, 5, 300)
    X, y = np.eye(5)[g], rng.poisson(np.array([1, 2, 3, 5, 8.0])[g]).astype(float)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = Est(random_state=1).fit(X, y)
    means = np.array([y[g == k].mean() for k in range(5)])
    assert np.max(np.abs(model.predict(np.eye(5)) - means)) < 0.6
    assert not [w for w in caught if "n_basis" in str(w.message)]


@pytest.mark.parametrize("Est", GP_REGRESSORS + HELD_OUT)
def test_categories_of_a_single_value_each_are_all_learned(Est):
    """A noiseless lookup: five one-hot categories, 300 rows, one target value per category
    (five distinct rows of about 60 copies). The networks held merged rows out whole, so
    two of the five categories were never trained on (DBK off by 0.97, Rich-BLL by 1.36).
    Rows of that many copies are replicates: every category within 0.05 of its value."""
    g = np.random.default_rng(0).integers(0, 5, 300)
    means = np.array([0, 1, 2, -1, 0.5])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the noise ends on its lower bound
        model = Est(random_state=0).fit(np.eye(5)[g], means[g])
    np.testing.assert_allclose(model.predict(np.eye(5)), means, atol=0.05)


def test_rows_given_many_times_are_not_replicates():
    """Copies make a design only where few cells are observed many times: five one-hot
    rows of about 60 copies are replicates; 300 distinct rows given 10 times (uniform
    sample weights of 10) are not, nor is data given twice."""
    from skbnngp._rows import duplicate_groups, rows_replicate

    cells = np.eye(5)
    assert rows_replicate(duplicate_groups(cells), 5, np.array([55, 60, 62, 58, 65.0]))
    X = np.random.default_rng(0).normal(size=(300, 3))
    for w in (np.full(300, 10.0), np.full(300, 2.0), None):
        assert not rows_replicate(duplicate_groups(X), 300, w)
    assert not rows_replicate(duplicate_groups(cells), 5, np.array([55, 60, 62, 58, 6.5]))


@pytest.mark.parametrize("Est", HELD_OUT)
def test_uniform_weights_of_ten_keep_the_coverage(Est):
    """Weights of 10 on every row (the data given 10 times) once read as replicates: the
    copies were split between training and validation, and Rich-BLL's 90 % intervals
    covered 0.08 of fresh rows (DBK 0.64). They cover about the nominal rate."""
    rng = np.random.default_rng(0)

    def draw(n):
        X = rng.uniform(-2, 2, (n, 3))
        return X, np.sin(X[:, 0]) + X[:, 1] ** 2 / 2 + 0.3 * rng.normal(size=n)

    (X, y), (Xt, yt) = draw(300), draw(2000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = Est(random_state=0).fit(X, y, sample_weight=np.full(300, 10.0))
    lo, hi = model.predict_interval(Xt, confidence=0.9)
    assert 0.82 <= np.mean((yt >= lo) & (yt <= hi)) <= 0.97


@pytest.mark.parametrize("seed", [6, 10])
def test_the_gps_calibrate_a_categorical_design_on_rows_not_whole_categories(seed):
    """Twenty one-hot categories, 300 rows, noise 0.5. The leave-one-out calibration left
    the rows of an input out together, so each residual was a whole category's
    extrapolation from the others; the calibration then narrowed every interval (factor
    0.50-0.55, 90 % coverage 0.70-0.78, NLPD up to 1.00 against the noise's 0.73 at these
    seeds). Where inputs recur the rows are now left out one by one."""
    rng = np.random.default_rng(seed)
    means = rng.normal(0, 1.5, 20)

    def draw(n):
        g = rng.integers(0, 20, n)
        return np.eye(20)[g], means[g]

    (X, f), (Xt, ft) = draw(300), draw(3000)
    y, yt = f + 0.5 * rng.normal(size=f.size), ft + 0.5 * rng.normal(size=ft.size)
    model = StudentTProcessRegressor(random_state=seed).fit(X, y)
    lo, hi = model.predict_interval(Xt, confidence=0.9)
    assert 0.82 <= np.mean((yt >= lo) & (yt <= hi)) <= 0.96
    assert -np.mean(model.predict_dist(Xt).logpdf(yt)) < 0.82


@pytest.mark.parametrize("Est", GP_REGRESSORS)
def test_merged_replicates_calibrate_like_the_rows_they_stand_for(Est):
    """Integer targets on five categories: exact repeats of (x, y) are merged into weighted
    rows. Where inputs recur, a merged row loses one copy at a time in the leave-one-out
    calibration (not all of them, which scored each row against the other values of its
    category alone), so a 1e-7 jitter that keeps every row apart gives the same intervals."""
    rng = np.random.default_rng(3)
    g = rng.integers(0, 5, 300)
    X, y = np.eye(5)[g], rng.poisson(np.array([1, 2, 3, 5, 8.0])[g]).astype(float)
    merged = Est(random_state=0).fit(X, y)
    apart = Est(random_state=0).fit(X, y + 1e-7 * rng.normal(size=300))
    for a, b in zip(merged.predict_interval(np.eye(5), confidence=0.9),
                    apart.predict_interval(np.eye(5), confidence=0.9)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    if Est is StudentTProcessRegressor:  # and so does ard="auto"'s leave-one-out gain
        merged = Est(ard="auto", random_state=0).fit(X, y)
        apart = Est(ard="auto", random_state=0).fit(X, y + 1e-7 * rng.normal(size=300))
        np.testing.assert_allclose(merged.ard_loo_gain_, apart.ard_loo_gain_, rtol=1e-3)


def test_the_student_t_process_reports_its_predictive_degrees_of_freedom():
    """Issue 47 item 2: ``df_`` printed 204 while the predictive's df was 1.78. ``df_`` is the
    process's own t; ``predictive_df_`` is always the df of what predict_dist returns."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 2))
    y = X[:, 0] + 0.3 * rng.standard_normal(80)
    for cal in ("auto", "gaussian", None):
        reg = StudentTProcessRegressor(calibration=cal, random_state=0, max_iter=30).fit(X, y)
        dist = reg.predict_dist(X[:3])
        assert reg.predictive_df_ <= reg.df_
        if np.isfinite(reg.predictive_df_):
            assert dist.dist.name == "t"
            assert np.allclose(dist.kwds.get("df", dist.args[0] if dist.args else None),
                               reg.predictive_df_)
        if cal != "auto":
            assert reg.predictive_df_ == reg.df_


def test_a_single_target_regressor_refuses_two_columns_naming_why():
    """Issue 47 item 3: Rich-BLL refused (n, 2) with sklearn's generic 'y should be a 1d
    array'."""
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(40, 2)), rng.normal(size=(40, 2))
    with pytest.raises(ValueError, match=r"fits one target, but y has shape \(40, 2\); fit "
                                         r"one RichBLLRegressor per column"):
        RichBLLRegressor(max_iter=5).fit(X, Y)


def test_the_student_t_classifier_on_repeated_rows_keeps_its_log_loss():
    """Issue 53 item 1: trained on every row twice (or on 50-90 % of the rows repeated),
    the test log loss stays within 0.05 of the rows once. The leave-one-out noise search
    saw each row predicted by its twin (0.41 -> 1.21), and the evidence counted a repeat of
    equal labels as a second observation (0.52): repeats are left out together and become
    relative weights."""
    from sklearn.metrics import log_loss

    from skbnngp import StudentTProcessClassifier

    from .conftest import noisy_binary

    rng = np.random.default_rng(0)
    X, y = noisy_binary(rng, 200)
    Xt, yt = noisy_binary(rng, 3000)

    def loss(A, b):
        return log_loss(yt, StudentTProcessClassifier(random_state=0, ard=False)
                        .fit(A, b).predict_proba(Xt))

    once = loss(X, y)
    assert once < 0.45
    assert loss(np.r_[X, X], np.r_[y, y]) < once + 0.05
    for frac in (0.5, 0.9):
        idx = np.random.default_rng(1).choice(200, int(frac * 200), replace=False)
        assert loss(np.r_[X, X[idx]], np.r_[y, y[idx]]) < once + 0.05, frac


def _two_targets(n, seed):
    """A noiseless smooth column beside a column with heavy-tailed (t, 1.5 df) noise."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, 2))
    f = np.sin(X[:, 0]) + 0.5 * X[:, 1]
    return X, np.c_[f, f + 0.3 * rng.standard_t(1.5, size=n)]


@pytest.mark.parametrize("Est", [StudentTProcessRegressor, MixedActivationGPRegressor,
                                 DBKRegressor])
def test_multi_output_targets_get_their_own_tails(Est):
    """Issue 47 item 3: one heavy-tailed column made every column's std infinite. Each
    target now has its own degrees of freedom and factor: the noiseless column keeps a
    variance (df >= 3) whatever the other column's tails, and the predictive of each
    column is the t its attributes name."""
    X, Y = _two_targets(120, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reg = Est(random_state=0).fit(X, Y)
        mean, std = reg.predict(X[:40], return_std=True)
    df, factor = reg.predictive_df_, reg.calibration_factor_
    assert np.shape(df) == np.shape(factor) == (2,)
    assert df[0] >= 3.0 and np.all(np.isfinite(std[:, 0]))
    dist = reg.predict_dist(X[:40])
    np.testing.assert_allclose(dist.mean(), mean, rtol=1e-10, atol=1e-12)
    finite = df > 2  # return_std and predict_dist agree wherever the variance exists
    np.testing.assert_allclose(dist.std()[:, finite], std[:, finite], rtol=1e-10)
    assert np.all(np.isinf(std[:, ~finite]))
    lo, hi = dist.interval(0.9)  # each column a t with its own df
    half = (hi - lo) / 2 / dist.std() if np.all(finite) else None
    if half is not None:
        from scipy import stats
        with np.errstate(invalid="ignore"):  # df = inf: the Gaussian's quantile
            expected = np.where(np.isinf(df), stats.norm.ppf(0.95),
                                stats.t.ppf(0.95, df) * np.sqrt((df - 2) / df))
        np.testing.assert_allclose(half, np.broadcast_to(expected, half.shape), rtol=1e-8)


def test_identical_columns_get_identical_calibrations_and_affine_predictives():
    """A column and an affine copy of it (3 y + 1) have the same normalised residuals:
    the per-target calibration gives both the same df and factor, and the copy's
    predictive is the column's, mapped by y -> 3 y + 1."""
    X, Y = _two_targets(80, 1)
    Y2 = np.c_[Y[:, 1], 3 * Y[:, 1] + 1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reg = MixedActivationGPRegressor(random_state=0).fit(X, Y2)
    np.testing.assert_allclose(reg.predictive_df_[0], reg.predictive_df_[1], rtol=1e-8)
    np.testing.assert_allclose(reg.calibration_factor_[0], reg.calibration_factor_[1],
                               rtol=1e-8)
    lo, hi = reg.predict_dist(X[:10]).interval(0.8)
    np.testing.assert_allclose(lo[:, 1], 3 * lo[:, 0] + 1, rtol=1e-7, atol=1e-7)
    np.testing.assert_allclose(hi[:, 1], 3 * hi[:, 0] + 1, rtol=1e-7, atol=1e-7)


def test_per_target_draws_follow_each_targets_predictive():
    """``sample_y`` under a per-target calibration: each column's draws have its own
    predictive's variance (Monte-Carlo, 6,000 draws; a t with df > 4 has a finite
    fourth moment, so the sample variance's relative error is a few percent)."""
    X, Y = _two_targets(100, 2)
    Y = np.c_[Y[:, 0], Y[:, 0] + 0.3 * np.random.default_rng(3).standard_normal(100)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reg = MixedActivationGPRegressor(random_state=0).fit(X, Y)
        draws = reg.sample_y(X[:3], n_samples=6000, random_state=0)  # (3, 2, 6000)
    assert np.shape(reg.predictive_df_) == (2,)
    if np.any(reg.predictive_df_ <= 4):
        pytest.skip("a fitted df <= 4: the sample variance has no finite error bound")
    np.testing.assert_allclose(draws.var(axis=2), reg.predict_dist(X[:3]).var(), rtol=0.15)


def test_a_per_target_calibration_round_trips_and_a_wrong_shape_is_refused():
    import pickle

    X, Y = _two_targets(60, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reg = MixedActivationGPRegressor(random_state=0).fit(X, Y)
    back = pickle.loads(pickle.dumps(reg))
    np.testing.assert_allclose(back.predict_dist(X[:5]).interval(0.9),
                               reg.predict_dist(X[:5]).interval(0.9), rtol=1e-12)
    state = reg.__getstate__()
    state["predictive_df_"] = np.array([3.0, 4.0, 5.0])
    with pytest.raises(ValueError, match="predictive_df_"):
        pickle.loads(pickle.dumps(reg)).__setstate__(state)


@pytest.mark.parametrize("Est", [StudentTProcessRegressor, MixedActivationGPRegressor,
                                 DBKRegressor])
def test_the_noisy_column_beside_a_noiseless_one_keeps_its_own_predictive(Est):
    """Issue 47: on (n, 2) targets with one noiseless column, the other column's predictive
    is what it is alone. The kernel (and so the mean) is shared by the targets, so the check
    is on what the calibration sets: the noisy column's 90 % intervals have the width of its
    own fit (median ratio within 0.7-1.4) and the same coverage of 1,000 fresh rows (within
    0.06: about 4 Monte-Carlo standard errors plus the two fits' difference)."""
    X, Y = _two_targets(120, 0)
    Xt, Yt = _two_targets(1000, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        both = Est(random_state=0).fit(X, Y)
        alone = Est(random_state=0).fit(X, Y[:, 1])
    lo, hi = both.predict_dist(Xt).interval(0.9)
    lo1, hi1 = alone.predict_dist(Xt).interval(0.9)
    ratio = np.median((hi[:, 1] - lo[:, 1]) / (hi1 - lo1))
    assert 0.7 <= ratio <= 1.4
    cover = np.mean((Yt[:, 1] >= lo[:, 1]) & (Yt[:, 1] <= hi[:, 1]))
    cover_alone = np.mean((Yt[:, 1] >= lo1) & (Yt[:, 1] <= hi1))
    assert abs(cover - cover_alone) <= 0.06


def test_the_levels_t_fit_recovers_a_t_and_counts_weights_as_repeats():
    """``fit_t_levels`` matches the central intervals of a large t sample over the levels:
    its degrees of freedom and scale come back, and integer weights equal repeated rows."""
    from scipy import stats

    from skbnngp._backend._calibration import fit_t_levels

    z = stats.t.rvs(3.0, scale=2.0, size=20000, random_state=np.random.default_rng(0))
    df, s = fit_t_levels(z)
    assert 2.0 < df < 4.5 and s == pytest.approx(2.0, rel=0.05)
    assert np.isinf(fit_t_levels(stats.norm.rvs(size=20000, random_state=1))[0]) or \
        fit_t_levels(stats.norm.rvs(size=20000, random_state=1))[0] > 30
    w = np.random.default_rng(1).integers(1, 4, size=300)
    assert fit_t_levels(z[:300], weights=w) == pytest.approx(
        fit_t_levels(np.repeat(z[:300], w)))
    # a cap on the degrees of freedom is kept: a model with t tails keeps at least them
    assert fit_t_levels(stats.norm.rvs(size=2000, random_state=2), max_df=5.0)[0] <= 5.0


def test_dbk_keeps_the_heavy_tails_of_heavy_tailed_noise():
    """DBK's noise share is as low on heavy-tailed data as on a noiseless target, and the
    near-noiseless guard (at least 3 degrees of freedom) hid the tails (doc/whats_new.rst).
    Residuals this heavy are noise: the calibration keeps a t without a variance, and the
    central intervals still cover."""
    from skbnngp.datasets import make_heavy_tailed

    X, y = make_heavy_tailed(300, 1, random_state=0)
    Xt, yt = make_heavy_tailed(2000, 1, random_state=1)
    reg = DBKRegressor(random_state=0).fit(X, y)
    assert reg.predictive_df_ <= 2
    assert 0.92 <= _coverage(reg, Xt, yt) <= 0.98


def test_dbk_narrows_a_bulk_inflated_by_t2_noise():
    """On noise of a t with 2 degrees of freedom the residuals' own t fit has about 3 of
    them; the calibration trusted a narrower scale only at 2 or fewer, so the noise that
    the outliers inflated set the bulk: the central 50 % interval held 0.93 of 3,000 fresh
    rows. It is now read as heavy tails: every central interval holds close to its level
    (Monte-Carlo error about 0.01; DBK's own under-coverage is a few points)."""
    rng = np.random.default_rng(3)
    X = rng.uniform(-2, 2, size=(3400, 3))
    y = np.sin(2 * X[:, 0]) + 0.5 * X[:, 1] ** 2 + 0.3 * rng.standard_t(2.0, size=3400)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reg = DBKRegressor(random_state=3).fit(X[:400], y[:400])
    assert reg.calibration_factor_ < 1 and reg.predictive_df_ <= 4
    for level, low, high in [(0.5, 0.4, 0.6), (0.9, 0.85, 0.95)]:
        lo, hi = reg.predict_interval(X[400:], confidence=level)
        assert low <= np.mean((y[400:] >= lo) & (y[400:] <= hi)) <= high


@pytest.mark.parametrize("shape", ["likelihood", "levels"])
def test_too_few_residuals_never_narrow_the_predictive(shape):
    """A variance factor below 1 needs at least the 19 residuals whose split-conformal rank
    exists at 95 %: two residuals near 0 (a two-row fit's leave-one-out ones) leave the
    predictive as it is, where the likelihood-ratio test alone shrank its variance
    ten-thousandfold; 19 residuals as narrow (or 10 of weight 2) still narrow it."""
    from skbnngp._backend._calibration import student_t_calibration

    z = np.array([0.01, -0.01])
    assert student_t_calibration(z, shape=shape)[1] >= 1.0
    assert student_t_calibration(z, shape=shape, weights=[9.0, 9.0])[1] >= 1.0
    narrow = 0.01 * np.random.default_rng(0).normal(size=19)
    assert student_t_calibration(narrow, shape=shape)[1] < 0.01
    assert student_t_calibration(narrow[:10], shape=shape, weights=np.full(10, 2.0))[1] < 0.01


def test_a_two_row_fit_keeps_its_models_uncertainty():
    """On two rows the mixed-activation GP's marginal likelihood takes a near-linear kernel
    of large amplitude, whose predictive is wide away from the rows; its two leave-one-out
    residuals are then tiny against their predictive std, and the calibration used to read
    that as a noise estimate 10^4 times too large (95 % coverage 0.00-0.03 of fresh rows)."""
    rng = np.random.default_rng(1)
    X, Xte = rng.normal(size=(2, 3)), rng.normal(size=(300, 3))
    y, yte = np.sin(X[:, 0]), np.sin(Xte[:, 0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = MixedActivationGPRegressor(random_state=0).fit(X, y)
        raw = MixedActivationGPRegressor(random_state=0, calibration=None).fit(X, y)
    assert model.calibration_factor_ >= 1.0
    assert _coverage(model, Xte, yte) >= _coverage(raw, Xte, yte)
    assert _coverage(model, Xte, yte) > 0.5


def test_relative_target_factors_keep_the_widest_targets_calibration():
    """The target whose residuals ask the most keeps its own factor; the others are set at
    their residuals' ratio to it, never wider than their own calibration."""
    from skbnngp._calibration import relative_target_factors

    # the widest asks 1.2 (kept), the others 0.3 and 0.6 of it -> 0.3 and 0.6
    np.testing.assert_allclose(relative_target_factors([1.0, 1.2, 1.0], [0.3, 1.2, 0.6]),
                               [0.3, 1.2, 0.6])
    # every target narrower than the model: the widest is held at 1 and the ratios kept
    np.testing.assert_allclose(relative_target_factors([1.0, 1.0], [0.25, 0.5]), [0.5, 1.0])
    # a target narrowed by its own heavy tails below the ratio keeps that narrower factor
    np.testing.assert_allclose(relative_target_factors([0.1, 2.0], [0.1, 2.0]), [0.1, 2.0])
    # residuals with no spread (a noiseless fit) leave the factors as they are
    np.testing.assert_allclose(relative_target_factors([1.0, 1.0], [0.0, 0.0]), [1.0, 1.0])
    np.testing.assert_allclose(relative_target_factors([1.0, 1.5], [0.0, 1.5]), [1.0, 1.5])
    np.testing.assert_allclose(relative_target_factors([1.0, 2.0], [np.nan, 2.0]), [1.0, 2.0])


def _unequal_noise_targets(n, seed):
    """Two columns whose noise, relative to their spread, differs about 20-fold."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, 4))
    f = np.sin(2 * X[:, 0]) + 0.5 * X[:, 1] ** 2
    return X, np.c_[f + 0.1 * rng.standard_normal(n),
                    100 + 50 * X[:, 2] + 20 * rng.standard_normal(n)]


def test_dbk_quiet_target_beside_a_noisy_one_is_not_over_wide():
    """DBK shares one noise variance across targets, fitted to both, so it is too wide for
    the quieter column; its calibration never narrows a target on its own residuals
    (they come from features learned on the same rows). 90 % intervals of the quiet column
    held 0.99 of fresh rows before the targets were calibrated relative to each other. Now
    the quiet column's factor is well below 1, its coverage of 2,000 fresh rows is near
    the noisy column's (both DBK's usual, slightly under nominal; Monte-Carlo error about
    0.007), and its log density beats its old over-wide one."""
    X, Y = _unequal_noise_targets(400, 0)
    Xt, Yt = _unequal_noise_targets(2000, 10)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reg = DBKRegressor(random_state=0).fit(X, Y)
    assert reg.calibration_factor_[0] < 0.6 <= reg.calibration_factor_[1]
    lo, hi = reg.predict_interval(Xt, confidence=0.9)
    cover = np.mean((Yt >= lo) & (Yt <= hi), axis=0)
    assert 0.8 <= cover[0] <= 0.95 and abs(cover[0] - cover[1]) <= 0.06
    dist = reg.predict_dist(Xt)
    # the old, floor-at-1 predictive of the quiet column: its std times 1 / sqrt(factor)
    sd_old = dist.std()[:, 0] / np.sqrt(reg.calibration_factor_[0])
    from scipy import stats
    old = stats.norm(dist.mean()[:, 0], sd_old).logpdf(Yt[:, 0]).mean()
    assert np.isinf(reg.predictive_df_[0])
    assert dist.logpdf(Yt)[:, 0].mean() > old + 0.1


@pytest.mark.parametrize("Est", [DBKRegressor, StudentTProcessRegressor,
                                 MixedActivationGPRegressor])
def test_multi_output_fits_warn_when_their_targets_noise_levels_differ(Est):
    """DBK's targets share one noise variance, and so do the Gaussian-process regressors'
    (relative to each normalised target); where the targets' residuals ask for variances
    far apart, some targets' intervals under-cover beyond what the calibration repairs
    (doc/whats_new.rst), and the fit says
    so, pointing to one model per target. Two affine copies of one column ask for the same
    variance and fit silently."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, size=(300, 3))
    f = np.sin(2 * X[:, 0]) + 0.5 * X[:, 1] ** 2
    Y = np.c_[f + 0.05 * rng.standard_normal(300), f + 1.0 * rng.standard_normal(300)]
    with pytest.warns(UserWarning, match=rf"share one noise variance.*one {Est.__name__} per"):
        Est(random_state=0).fit(X, Y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        Est(random_state=0).fit(X, np.c_[Y[:, 1], 3 * Y[:, 1] + 1])


def test_dbk_constant_column_beside_a_noisy_one_keeps_a_positive_factor():
    """Fuzz reproducer: a constant target beside a noisy one has residuals of no spread,
    and the relative calibration set its variance factor to 0, which a saved model then
    refused to load. That target keeps its own calibration."""
    import pickle

    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 3))
    Y = np.c_[np.full(120, 1e9), X[:, 0] + 0.3 * rng.normal(size=120)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reg = DBKRegressor(random_state=0).fit(X, Y)
    assert np.all(reg.calibration_factor_ > 0)
    back = pickle.loads(pickle.dumps(reg))
    # a round trip in one process: rounding of the reloaded factor only (rtol 1e-10)
    np.testing.assert_allclose(back.predict(X[:5], return_std=True)[1],
                               reg.predict(X[:5], return_std=True)[1], rtol=1e-10)
