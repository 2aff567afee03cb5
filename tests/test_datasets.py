"""Tests for skbnngp.datasets: embedded loaders, the registry and the synthetic makers."""

from importlib import resources

import numpy as np
import pytest

from skbnngp.datasets import (
    list_datasets,
    load_auto_mpg,
    load_concrete,
    load_cpu_performance,
    load_dataset,
    make_gap_1d,
    make_heavy_tailed,
)

# name, loader, shape, first row (features + target) of the original file
EMBEDDED = [
    ("concrete", load_concrete, (1030, 8),
     [540, 0, 0, 162, 2.5, 1040, 676, 28, 79.99]),
    ("auto_mpg", load_auto_mpg, (392, 7),
     [8, 307, 130, 3504, 12, 70, 1, 18]),
    ("cpu_performance", load_cpu_performance, (209, 6),
     [125, 256, 6000, 256, 16, 128, 198]),
]
REGRESSION = ["auto_mpg", "concrete", "cpu_performance", "diabetes"]
CLASSIFICATION = ["breast_cancer", "digits", "iris", "wine"]


@pytest.mark.parametrize("name, loader, shape, first", EMBEDDED)
def test_embedded_bunch(name, loader, shape, first):
    bunch = loader()
    assert {"data", "target", "feature_names", "target_names", "DESCR", "frame",
            "task"} <= set(bunch)
    assert bunch.data.shape == shape and bunch.target.shape == (shape[0],)
    assert bunch.data.dtype == np.float64 and bunch.target.dtype == np.float64
    assert np.all(np.isfinite(bunch.data)) and np.all(np.isfinite(bunch.target))
    assert len(bunch.feature_names) == shape[1] and len(bunch.target_names) == 1
    assert bunch.frame is None and bunch.task == "regression"
    np.testing.assert_array_equal(np.append(bunch.data[0], bunch.target[0]), first)
    assert "CC BY 4.0" in bunch.DESCR and "Licence" in bunch.DESCR
    assert "UCI Machine Learning Repository" in bunch.DESCR


@pytest.mark.parametrize("name, loader, shape, first", EMBEDDED)
def test_embedded_return_X_y_and_as_frame(name, loader, shape, first):
    bunch = loader()
    X, y = loader(return_X_y=True)
    np.testing.assert_array_equal(X, bunch.data)
    np.testing.assert_array_equal(y, bunch.target)
    framed = loader(as_frame=True)
    assert list(framed.frame.columns) == bunch.feature_names + bunch.target_names
    assert list(framed.data.columns) == bunch.feature_names
    assert framed.target.name == bunch.target_names[0]
    np.testing.assert_array_equal(framed.data.to_numpy(), bunch.data)
    np.testing.assert_array_equal(framed.target.to_numpy(), bunch.target)
    Xf, yf = loader(return_X_y=True, as_frame=True)
    assert Xf.shape == shape and yf.shape == (shape[0],)


def test_embedded_summary_statistics():
    """Regression guards against a corrupted file (values of the published data sets)."""
    concrete = load_concrete()
    assert concrete.target.mean() == pytest.approx(35.81796, abs=1e-4)
    assert concrete.target.max() == 82.6 and concrete.data[:, 7].max() == 365
    auto = load_auto_mpg()
    assert auto.target.mean() == pytest.approx(23.44592, abs=1e-4)
    assert set(np.unique(auto.data[:, 6])) == {1.0, 2.0, 3.0}
    cpu = load_cpu_performance()
    assert cpu.target.min() == 6 and cpu.target.max() == 1150


def test_data_files_are_small():
    root = resources.files("skbnngp.datasets")
    sizes = [f.stat().st_size if hasattr(f, "stat") else len(f.read_bytes())
             for f in (root / "data").iterdir()]
    assert len(sizes) >= 3 and sum(sizes) < 1_000_000
    for name, *_ in EMBEDDED:
        assert (root / "descr" / f"{name}.rst").is_file()


def test_list_datasets():
    assert list_datasets("regression") == REGRESSION
    assert list_datasets("classification") == CLASSIFICATION
    assert list_datasets() == sorted(REGRESSION + CLASSIFICATION)
    with pytest.raises(ValueError, match="task"):
        list_datasets("clustering")


@pytest.mark.parametrize("name", REGRESSION + CLASSIFICATION)
def test_load_dataset(name):
    bunch = load_dataset(name)
    task = "regression" if name in REGRESSION else "classification"
    assert bunch.task == task
    assert {"data", "target", "feature_names", "target_names", "DESCR", "frame"} <= set(bunch)
    assert bunch.data.ndim == 2 and bunch.target.shape == (bunch.data.shape[0],)
    assert np.all(np.isfinite(bunch.data))
    X, y = load_dataset(name, return_X_y=True)
    np.testing.assert_array_equal(X, bunch.data)
    if task == "classification":
        assert np.issubdtype(y.dtype, np.integer)


def test_load_dataset_as_frame_for_sklearn_sets():
    bunch = load_dataset("diabetes", as_frame=True)
    assert bunch.frame.shape == (442, 11) and bunch.target_names == ["target"]


def test_unknown_name_lists_valid_names():
    with pytest.raises(ValueError, match="name") as info:
        load_dataset("yacht")
    for valid in REGRESSION + CLASSIFICATION:
        assert valid in str(info.value)


def test_make_gap_1d():
    X, y = make_gap_1d(200, random_state=0)
    assert X.shape == (200, 1) and y.shape == (200,) and X.dtype == np.float64
    assert np.all((X >= -3) & (X <= 3)) and not np.any((X > -1) & (X < 1))
    assert (X < -1).sum() > 50 and (X > 1).sum() > 50  # both sides are populated
    X2, y2 = make_gap_1d(200, random_state=0)
    np.testing.assert_array_equal(X, X2)
    np.testing.assert_array_equal(y, y2)
    assert not np.array_equal(y, make_gap_1d(200, random_state=1)[1])
    resid = y - (np.sin(2 * X[:, 0]) + 0.3 * X[:, 0])
    assert resid.std() == pytest.approx(0.1, rel=0.2)  # noise sd; n = 200
    Xg, _ = make_gap_1d(100, gap=(0.0, 2.0), x_range=(-1.0, 4.0), random_state=0)
    assert not np.any((Xg > 0) & (Xg < 2))
    with pytest.raises(ValueError, match="gap"):
        make_gap_1d(gap=(-4.0, 0.0))
    with pytest.raises(ValueError, match="n_samples"):
        make_gap_1d(0)


def test_make_heavy_tailed_is_repeatable_and_heavy_tailed():
    X, y, f = make_heavy_tailed(2000, 3, random_state=0, return_latent=True)
    assert X.shape == (2000, 3) and y.shape == f.shape == (2000,)
    X2, y2 = make_heavy_tailed(2000, 3, random_state=0)
    np.testing.assert_array_equal(X, X2)
    np.testing.assert_array_equal(y, y2)
    # The same seed draws the same function whatever n_samples.
    Xs, _, fs = make_heavy_tailed(50, 3, random_state=0, return_latent=True)
    np.testing.assert_array_equal(Xs, X[:50])
    np.testing.assert_allclose(fs, f[:50])
    assert 0.3 < f.std() < 2.0  # a unit-variance GP draw
    resid = y - f  # 0.8 * Cauchy: the extremes dwarf the interquartile range
    iqr = np.subtract(*np.percentile(resid, [75, 25]))
    assert iqr == pytest.approx(1.6, rel=0.15)  # IQR of a Cauchy is 2, times 0.8
    assert np.abs(resid).max() > 50 * iqr
    _, yg, fg = make_heavy_tailed(5000, random_state=1, df=np.inf, noise=0.5,
                                  return_latent=True)
    assert (yg - fg).std() == pytest.approx(0.5, rel=0.05)  # Gaussian noise, n = 5000
    with pytest.raises(ValueError, match="df"):
        make_heavy_tailed(df=0.0)


def test_step_function_levels():
    """The DBK paper's step function: levels 0.3, 0.9, -0.6, 0 (plus a 0.01 oscillation)."""
    from skbnngp.datasets import make_step_1d, step_function_1d
    levels = step_function_1d(np.array([-0.9, -0.3, 0.2, 0.7]))
    np.testing.assert_allclose(levels, [0.3, 0.9, -0.6, 0.0], atol=0.0101)
    X, y, f = make_step_1d(300, noise=0.1, random_state=0, return_latent=True)
    assert X.shape == (300, 1) and np.all(np.abs(X) <= 1)
    assert 0.08 < np.std(y - f) < 0.12
