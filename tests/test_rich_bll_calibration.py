"""RichBLLRegressor(variance_calibration="validation"): the split-conformal factor from the
rows held out of training, its effect on every predictive output, and the settings that
cannot use it."""

import pickle

import numpy as np
import pytest
from scipy import stats

from skbnngp import RichBLLRegressor
from skbnngp._backend import loo_variance_factor
from skbnngp._rich_bll import RichBLLRegressor as _Impl

from ._promise import assert_same_predictions

SMALL = dict(hidden_layer_sizes=(16,), max_iter=400, n_iter_no_change=10,
             learning_rate_schedule="constant", device="cpu", random_state=0)
Q95 = stats.norm.ppf(0.975)


def _heteroscedastic(n=160, seed=0):
    """Noise sd from 0.05 to 0.8 across x: a homoscedastic predictive under-covers the
    noisy end, so the held-out residuals ask for a factor above 1."""
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(-1, 1, n))
    y = np.sin(3 * x) + (0.05 + 0.375 * (x + 1)) * rng.standard_t(3, size=n)
    return x[:, None], y


@pytest.fixture
def validation_rows(monkeypatch):
    """The validation rows of each fit, as ``_train`` returns them."""
    seen = []
    orig = _Impl._train

    def _train(self, net, Xt, Yt, rng):
        out = orig(self, net, Xt, Yt, rng)
        seen.append(out[2].cpu().numpy())
        return out

    monkeypatch.setattr(_Impl, "_train", _train)
    return seen


def test_factor_is_the_split_conformal_quantile_of_the_held_out_rows(validation_rows):
    X, y = _heteroscedastic()
    # a fixed noise well below the residuals' scale: an over-confident predictive
    kw = dict(SMALL, noise_variance=0.01)
    cal = RichBLLRegressor(variance_calibration="validation", **kw).fit(X, y)
    plain = RichBLLRegressor(**kw).fit(X, y)  # the same network and posterior
    va = validation_rows[0]
    np.testing.assert_array_equal(va, validation_rows[1])
    assert len(va) == int(np.ceil(0.2 * len(y)))
    mu_v, sd_v = plain.predict(X[va], return_std=True)
    z = (y[va] - mu_v) / sd_v
    expected = loo_variance_factor(z, Q95, 0.95)
    assert cal.calibration_factor_ == pytest.approx(expected, rel=1e-9)
    assert plain.calibration_factor_ == 1.0
    assert cal.calibration_factor_ > 2.0  # the residuals are far outside the intervals
    # the widened interval holds the ceil(0.95 (n_v + 1))-th smallest |z|, and no less
    a = np.sort(np.abs(z))
    rank = int(np.ceil(0.95 * (len(a) + 1))) - 1
    assert a[rank] == pytest.approx(Q95 * np.sqrt(cal.calibration_factor_), rel=1e-9)
    inside = np.abs(z) <= Q95 * np.sqrt(cal.calibration_factor_) * (1 + 1e-12)
    assert inside.mean() >= 0.95


def test_every_predictive_output_is_widened_by_the_factor():
    X, y = _heteroscedastic()
    Xq = np.linspace(-1.5, 1.5, 7)[:, None]
    cal = RichBLLRegressor(variance_calibration="validation", **SMALL).fit(X, y)
    plain = RichBLLRegressor(**SMALL).fit(X, y)
    k = cal.calibration_factor_
    m1, s1 = cal.predict(Xq, return_std=True)
    m0, s0 = plain.predict(Xq, return_std=True)
    np.testing.assert_allclose(m1, m0, rtol=1e-12)  # the mean is unchanged
    np.testing.assert_allclose(s1, np.sqrt(k) * s0, rtol=1e-10)
    np.testing.assert_allclose(cal.predict(Xq, return_cov=True)[1],
                               k * plain.predict(Xq, return_cov=True)[1], rtol=1e-10)
    np.testing.assert_allclose(cal.predict_dist(Xq).std(), s1, rtol=1e-12)
    # the latent variance alone is scaled too (the same process with a larger amplitude)
    cal.set_params(include_noise=False), plain.set_params(include_noise=False)
    np.testing.assert_allclose(cal.predict_std(Xq), np.sqrt(k) * plain.predict_std(Xq),
                               rtol=1e-10)


def test_never_narrows():
    X, y = _heteroscedastic()
    # a fixed noise far above the residuals: every held-out row is deep inside its interval
    reg = RichBLLRegressor(variance_calibration="validation", noise_variance=25.0,
                           **SMALL).fit(X, y)
    assert reg.calibration_factor_ == 1.0


def test_pickle_keeps_the_factor_and_an_old_model_predicts_as_before():
    X, y = _heteroscedastic()
    reg = RichBLLRegressor(variance_calibration="validation", **SMALL).fit(X, y)
    back = pickle.loads(pickle.dumps(reg))
    assert back.calibration_factor_ == reg.calibration_factor_
    # a round trip: equal under the package's repeatability promise, not bit for bit
    assert_same_predictions(back.predict_std(X[:5]), reg.predict_std(X[:5]))
    # a model pickled before the attribute existed predicts its uncalibrated variance
    plain = RichBLLRegressor(**SMALL).fit(X, y)
    del plain.calibration_factor_
    old = pickle.loads(pickle.dumps(plain))
    assert_same_predictions(old.predict_std(X[:5]) * np.sqrt(reg.calibration_factor_),
                            reg.predict_std(X[:5]))


@pytest.mark.parametrize("kw, match", [
    (dict(refit=True), "refit"),
    (dict(early_stopping=False), "early_stopping"),
])
def test_settings_without_held_out_rows_are_refused(kw, match):
    X, y = _heteroscedastic(60)
    with pytest.raises(ValueError, match=f"variance_calibration.*{match}"):
        RichBLLRegressor(variance_calibration="validation", **{**SMALL, **kw}).fit(X, y)


def test_a_post_hoc_head_is_refused():
    from skbnngp._backend import build_mlp
    X, y = _heteroscedastic(60)
    net = build_mlp(1, (8,), 1, activation="relu", seed=0)
    with pytest.raises(ValueError, match="variance_calibration.*train_network"):
        RichBLLRegressor(network=net, train_network=False, variance_calibration="validation",
                         device="cpu").fit(X, y)


def test_invalid_value_is_refused():
    X, y = _heteroscedastic(60)
    with pytest.raises(ValueError, match="variance_calibration"):
        RichBLLRegressor(variance_calibration="loo", **SMALL).fit(X, y)
