"""Small real regression data sets shipped with skbnngp, a registry that adds scikit-learn's
bundled sets, and synthetic makers for uncertainty checks.

Embedded data (``skbnngp/datasets/data/*.csv.gz``, descriptions with licence and citation in
``skbnngp/datasets/descr/*.rst``), all from the UCI Machine Learning Repository under CC BY 4.0:

- :func:`load_concrete`: concrete compressive strength, 1030 x 8.
- :func:`load_auto_mpg`: fuel consumption of cars, 392 x 7.
- :func:`load_cpu_performance`: relative CPU performance, 209 x 6 (heavy right tail).

:func:`load_dataset` also serves scikit-learn's ``diabetes`` (regression) and ``iris``,
``wine``, ``breast_cancer``, ``digits`` (classification), adding a ``task`` field.
"""

from __future__ import annotations

import gzip
from importlib import resources
from numbers import Integral, Real

import numpy as np
from sklearn import datasets as _sk_datasets
from sklearn.utils import Bunch, check_random_state

from ..utils._sklearn_compat import Interval, StrOptions, validate_params

__all__ = [
    "load_concrete",
    "load_auto_mpg",
    "load_cpu_performance",
    "load_dataset",
    "list_datasets",
    "make_gap_1d",
    "make_heavy_tailed",
    "make_step_1d",
    "step_function_1d",
]

_EMBEDDED = ("auto_mpg", "concrete", "cpu_performance")
_SKLEARN = {
    "diabetes": ("regression", _sk_datasets.load_diabetes),
    "iris": ("classification", _sk_datasets.load_iris),
    "wine": ("classification", _sk_datasets.load_wine),
    "breast_cancer": ("classification", _sk_datasets.load_breast_cancer),
    "digits": ("classification", _sk_datasets.load_digits),
}
_TASKS = {**{name: "regression" for name in _EMBEDDED},
          **{name: task for name, (task, _) in _SKLEARN.items()}}


def _pandas():
    try:
        import pandas
    except ImportError as exc:  # pragma: no cover - pandas is a test dependency
        raise ImportError("as_frame=True needs pandas: pip install pandas.") from exc
    return pandas


def _load_embedded(name, return_X_y, as_frame):
    """Read ``data/<name>.csv.gz`` (header row, target in the last column)."""
    root = resources.files(__name__)
    with (root / "data" / f"{name}.csv.gz").open("rb") as raw, \
            gzip.open(raw, "rt", encoding="ascii") as text:
        header = text.readline().strip().split(",")
        values = np.loadtxt(text, delimiter=",", dtype=np.float64, ndmin=2)
    descr = (root / "descr" / f"{name}.rst").read_text(encoding="utf-8")
    feature_names, target_name = header[:-1], header[-1]
    data, target, frame = values[:, :-1], values[:, -1], None
    if as_frame:
        frame = _pandas().DataFrame(values, columns=header)
        data, target = frame[feature_names], frame[target_name]
    if return_X_y:
        return data, target
    return Bunch(data=data, target=target, frame=frame, feature_names=feature_names,
                 target_names=[target_name], DESCR=descr, task="regression",
                 filename=f"{name}.csv.gz", data_module=f"{__name__}.data")


_LOADER_CONSTRAINTS = {"return_X_y": ["boolean"], "as_frame": ["boolean"]}


@validate_params(_LOADER_CONSTRAINTS, prefer_skip_nested_validation=True)
def load_concrete(*, return_X_y=False, as_frame=False):
    """Load the concrete compressive strength data set (regression, 1030 x 8).

    =================   ==============
    Samples             1030
    Features            8, real (kg/m^3 of 7 ingredients; age in days)
    Target              real, 2.33 - 82.6 (MPa)
    =================   ==============

    Source: UCI Machine Learning Repository (Yeh 1998), CC BY 4.0; see ``DESCR``.

    Parameters
    ----------
    return_X_y : bool, default=False
        Return ``(data, target)`` instead of a Bunch.
    as_frame : bool, default=False
        Return pandas objects: ``data`` a DataFrame, ``target`` a Series and ``frame`` a
        DataFrame with both.

    Returns
    -------
    data : :class:`~sklearn.utils.Bunch`
        ``data`` (ndarray of shape (1030, 8) or DataFrame), ``target`` (ndarray of shape
        (1030,) or Series), ``feature_names``, ``target_names``, ``frame`` (None unless
        ``as_frame``), ``DESCR``, ``task`` (``"regression"``), ``filename``, ``data_module``.
    (data, target) : tuple if ``return_X_y`` is True

    Examples
    --------
    >>> from skbnngp.datasets import load_concrete
    >>> X, y = load_concrete(return_X_y=True)
    >>> X.shape, y.shape
    ((1030, 8), (1030,))
    """
    return _load_embedded("concrete", return_X_y, as_frame)


@validate_params(_LOADER_CONSTRAINTS, prefer_skip_nested_validation=True)
def load_auto_mpg(*, return_X_y=False, as_frame=False):
    """Load the Auto MPG data set (regression, 392 x 7).

    =================   ==============
    Samples             392 (cars with unknown horsepower removed)
    Features            7, real or integer-coded (``origin`` is a category 1/2/3)
    Target              real, 9 - 46.6 (miles per gallon)
    =================   ==============

    Source: UCI Machine Learning Repository (Quinlan 1993), CC BY 4.0; see ``DESCR``.

    Parameters
    ----------
    return_X_y : bool, default=False
        Return ``(data, target)`` instead of a Bunch.
    as_frame : bool, default=False
        Return pandas objects (see :func:`load_concrete`).

    Returns
    -------
    data : :class:`~sklearn.utils.Bunch`
        Same fields as :func:`load_concrete`.
    (data, target) : tuple if ``return_X_y`` is True

    Examples
    --------
    >>> from skbnngp.datasets import load_auto_mpg
    >>> load_auto_mpg().feature_names[:3]
    ['cylinders', 'displacement', 'horsepower']
    """
    return _load_embedded("auto_mpg", return_X_y, as_frame)


@validate_params(_LOADER_CONSTRAINTS, prefer_skip_nested_validation=True)
def load_cpu_performance(*, return_X_y=False, as_frame=False):
    """Load the relative CPU performance data set (regression, 209 x 6).

    =================   ==============
    Samples             209
    Features            6, non-negative integers (cycle time, memory, cache, channels)
    Target              integer, 6 - 1150 (published relative performance; right-skewed)
    =================   ==============

    Source: UCI Machine Learning Repository "Computer Hardware" (Ein-Dor & Feldmesser 1987),
    CC BY 4.0; see ``DESCR``.

    Parameters
    ----------
    return_X_y : bool, default=False
        Return ``(data, target)`` instead of a Bunch.
    as_frame : bool, default=False
        Return pandas objects (see :func:`load_concrete`).

    Returns
    -------
    data : :class:`~sklearn.utils.Bunch`
        Same fields as :func:`load_concrete`.
    (data, target) : tuple if ``return_X_y`` is True

    Examples
    --------
    >>> import numpy as np
    >>> from skbnngp.datasets import load_cpu_performance
    >>> X, y = load_cpu_performance(return_X_y=True)
    >>> X.shape, float(np.median(y))
    ((209, 6), 50.0)
    """
    return _load_embedded("cpu_performance", return_X_y, as_frame)


@validate_params(
    {"task": [StrOptions({"regression", "classification"}), None]},
    prefer_skip_nested_validation=True,
)
def list_datasets(task=None):
    """Names accepted by :func:`load_dataset`.

    Parameters
    ----------
    task : {"regression", "classification"}, default=None
        Only the data sets of this task; None lists all.

    Returns
    -------
    names : list of str
        Sorted.

    Examples
    --------
    >>> from skbnngp.datasets import list_datasets
    >>> list_datasets("regression")
    ['auto_mpg', 'concrete', 'cpu_performance', 'diabetes']
    """
    return sorted(name for name, kind in _TASKS.items() if task in (None, kind))


@validate_params(
    {"name": [StrOptions(set(_TASKS))], **_LOADER_CONSTRAINTS},
    prefer_skip_nested_validation=True,
)
def load_dataset(name, *, return_X_y=False, as_frame=False):
    """Load an embedded or a scikit-learn bundled data set by name.

    Parameters
    ----------
    name : str
        One of :func:`list_datasets`: ``"auto_mpg"``, ``"concrete"``, ``"cpu_performance"``
        (embedded), ``"diabetes"`` (regression), ``"iris"``, ``"wine"``, ``"breast_cancer"``,
        ``"digits"`` (classification, from :mod:`sklearn.datasets`). Any other name raises
        ``ValueError`` listing the valid ones.
    return_X_y : bool, default=False
        Return ``(data, target)`` instead of a Bunch.
    as_frame : bool, default=False
        Return pandas objects (see :func:`load_concrete`).

    Returns
    -------
    data : :class:`~sklearn.utils.Bunch`
        ``data``, ``target``, ``feature_names``, ``target_names``, ``frame``, ``DESCR`` and
        ``task`` (``"regression"`` or ``"classification"``), plus whatever the scikit-learn
        loader adds.
    (data, target) : tuple if ``return_X_y`` is True

    Examples
    --------
    >>> from skbnngp.datasets import load_dataset
    >>> bunch = load_dataset("iris")
    >>> bunch.task, bunch.data.shape
    ('classification', (150, 4))
    """
    if name in _EMBEDDED:
        return _load_embedded(name, return_X_y, as_frame)
    task, loader = _SKLEARN[name]
    if return_X_y:
        return loader(return_X_y=True, as_frame=as_frame)
    bunch = loader(as_frame=as_frame)
    bunch.task = task
    if "target_names" not in bunch:  # diabetes has one unnamed target
        bunch.target_names = ["target"]
    bunch.setdefault("frame", None)
    return bunch


def _check_range(name, value):
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a pair (low, high) of numbers, got {value!r}.") from None
    if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
        raise ValueError(f"{name} must satisfy low < high (finite), got {value!r}.")
    return lo, hi


@validate_params(
    {"n_samples": [Interval(Integral, 1, None, closed="left")],
     "noise": [Interval(Real, 0, None, closed="left")],
     "gap": [tuple, list], "x_range": [tuple, list], "random_state": ["random_state"]},
    prefer_skip_nested_validation=True,
)
def make_gap_1d(n_samples=100, *, noise=0.1, gap=(-1.0, 1.0), x_range=(-3.0, 3.0),
                random_state=None):
    """1-D regression data with a gap in the inputs, to check "in-between" uncertainty.

    ``x`` is uniform on ``x_range`` with the open interval ``gap`` removed, and
    ``y = sin(2 x) + 0.3 x + noise * eps``, ``eps ~ N(0, 1)``. A good predictive is certain
    near the data and widens inside the gap (Foong et al. 2019).

    Parameters
    ----------
    n_samples : int, default=100
        Number of points.
    noise : float, default=0.1
        Standard deviation of the Gaussian noise.
    gap : tuple of two floats, default=(-1.0, 1.0)
        Input interval without data; it must lie strictly inside ``x_range``.
    x_range : tuple of two floats, default=(-3.0, 3.0)
        Input interval.
    random_state : int, RandomState instance or None, default=None
        Seed for reproducible output.

    Returns
    -------
    X : ndarray of shape (n_samples, 1)
    y : ndarray of shape (n_samples,)

    References
    ----------
    .. [1] Foong, A. Y. K., Li, Y., Hernandez-Lobato, J. M. and Turner, R. E. (2019).
       'In-between' uncertainty in Bayesian neural networks. ICML Workshop on Uncertainty
       and Robustness in Deep Learning.

    Examples
    --------
    >>> from skbnngp.datasets import make_gap_1d
    >>> X, y = make_gap_1d(50, random_state=0)
    >>> X.shape, bool(((X < -1) | (X > 1)).all())
    ((50, 1), True)
    """
    lo, hi = _check_range("x_range", x_range)
    g_lo, g_hi = _check_range("gap", gap)
    if not lo < g_lo < g_hi < hi:
        raise ValueError(f"gap={gap!r} must lie strictly inside x_range={x_range!r}.")
    rng = check_random_state(random_state)
    left = g_lo - lo
    u = rng.uniform(0.0, left + hi - g_hi, size=n_samples)
    x = np.where(u < left, lo + u, g_hi + (u - left))
    y = np.sin(2 * x) + 0.3 * x + noise * rng.standard_normal(n_samples)
    return x[:, None], y


@validate_params(
    {"n_samples": [Interval(Integral, 1, None, closed="left")],
     "n_features": [Interval(Integral, 1, None, closed="left")],
     "df": [Interval(Real, 0, None, closed="right")],  # (0, inf]: inf gives Gaussian noise
     "noise": [Interval(Real, 0, None, closed="left")],
     "length_scale": [Interval(Real, 0, None, closed="neither")],
     "random_state": ["random_state"], "return_latent": ["boolean"]},
    prefer_skip_nested_validation=True,
)
def make_heavy_tailed(n_samples=300, n_features=1, *, df=1.0, noise=0.8, length_scale=1.0,
                      random_state=None, return_latent=False):
    """Smooth random function plus Student-t noise (like the paper's ``syn-t`` set).

    ``X`` is uniform on ``[-5, 5]^n_features``; ``f`` is a draw from a zero-mean Gaussian
    process with the RBF kernel ``exp(-|x - x'|^2 / (2 length_scale^2))``, approximated by
    1000 random Fourier features (Rahimi & Recht 2007); ``y = f(X) + noise * eps`` with
    ``eps ~ t_df``. The defaults (``df=1``: Cauchy noise, ``noise=0.8``, 300 points) follow
    Lee et al. 2022, section 5.1; a Gaussian process with Gaussian noise is not robust to them,
    while a
    Student-t process should be.

    The function is drawn before the inputs, so one ``random_state`` gives the same ``f``
    whatever ``n_samples``.

    Parameters
    ----------
    n_samples : int, default=300
        Number of points.
    n_features : int, default=1
        Input dimension.
    df : float, default=1.0
        Degrees of freedom of the noise (``inf`` gives Gaussian noise).
    noise : float, default=0.8
        Scale of the noise.
    length_scale : float, default=1.0
        Length-scale of the RBF kernel of ``f``.
    random_state : int, RandomState instance or None, default=None
        Seed for reproducible output.
    return_latent : bool, default=False
        Also return the noise-free values ``f(X)``.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features)
    y : ndarray of shape (n_samples,)
    f : ndarray of shape (n_samples,)
        Only when ``return_latent`` is True.

    Examples
    --------
    >>> import numpy as np
    >>> from skbnngp.datasets import make_heavy_tailed
    >>> X, y, f = make_heavy_tailed(200, 2, random_state=0, return_latent=True)
    >>> X.shape, y.shape, bool(np.all(np.isfinite(y)))
    ((200, 2), (200,), True)
    """
    rng = check_random_state(random_state)
    n_components = 1000
    omega = rng.standard_normal((n_features, n_components)) / length_scale
    phase = rng.uniform(0.0, 2 * np.pi, size=n_components)
    weight = rng.standard_normal(n_components)
    X = rng.uniform(-5.0, 5.0, size=(n_samples, n_features))
    f = np.sqrt(2.0 / n_components) * np.cos(X @ omega + phase) @ weight
    eps = rng.standard_normal(n_samples) if np.isinf(df) else rng.standard_t(df, n_samples)
    y = f + noise * eps
    return (X, y, f) if return_latent else (X, y)


def make_step_1d(n_samples=500, *, noise=0.1, random_state=None, return_latent=False):
    """The 1-D step function of Zhu et al. (DBK paper, §4.1), with Gaussian noise.

    ``f(x) = 0.3 (1 - s(200(x + 0.6))) + 0.9 (s(200(x + 0.6)) - s(200 x))
    - 0.6 (s(200 x) - s(200(x - 0.4))) + 0.01 sin(50 sin(10 x))`` with ``s`` the logistic
    sigmoid: smoothed steps between the levels 0.3, 0.9, -0.6 and 0 at x = -0.6, 0 and 0.4,
    plus a small oscillation. ``x`` is uniform on [-1, 1] and ``y = f(x) + noise * eps``
    (the paper: noise variance 0.01).

    Parameters
    ----------
    n_samples : int, default=500
    noise : float, default=0.1
        Standard deviation of the Gaussian noise.
    random_state : int, RandomState instance or None, default=None
    return_latent : bool, default=False
        Also return ``f(X)``.

    Returns
    -------
    X : ndarray of shape (n_samples, 1)
    y : ndarray of shape (n_samples,)
    f : ndarray of shape (n_samples,)
        Only when ``return_latent`` is True.

    Examples
    --------
    >>> from skbnngp.datasets import make_step_1d
    >>> X, y, f = make_step_1d(4, noise=0.0, random_state=0, return_latent=True)
    >>> X.shape, bool((y == f).all())
    ((4, 1), True)
    """
    rng = check_random_state(random_state)
    X = rng.uniform(-1.0, 1.0, size=(n_samples, 1))
    f = step_function_1d(X[:, 0])
    y = f + noise * rng.standard_normal(n_samples)
    return (X, y, f) if return_latent else (X, y)


def step_function_1d(x):
    """The noise-free step function of :func:`make_step_1d` at ``x`` (any shape)."""
    from scipy.special import expit as s

    x = np.asarray(x, dtype=float)
    return (0.3 * (1 - s(200 * (x + 0.6))) + 0.9 * (s(200 * (x + 0.6)) - s(200 * x))
            - 0.6 * (s(200 * x) - s(200 * (x - 0.4)))) + 0.01 * np.sin(50 * np.sin(10 * x))
