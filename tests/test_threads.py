"""Every fit and prediction runs under the thread policy (skbnngp/_backend/_threads.py,
issue 49 item 1): torch's setting is restored after, a user's limit is respected, and the
number of threads does not change the fitted model beyond round-off."""

import numpy as np
import pytest
import torch
from threadpoolctl import threadpool_limits

from skbnngp import (
    MixedActivationGPRegressor,
    RichBLLRegressor,
    StudentTProcessRegressor,
    _base,
)
from skbnngp._backend._threads import (
    ENV_VAR,
    allowed_cores,
    dense_work,
    low_rank_work,
    network_work,
)
from skbnngp.utils import all_estimators

from .conftest import TINY, persistence_data

pytestmark = pytest.mark.filterwarnings("ignore")

ESTIMATORS = all_estimators()
NAMES = [name for name, _ in ESTIMATORS]


_real = _base.use_threads


@pytest.fixture
def watch_threads(monkeypatch):
    """The thread counts torch had inside each fit/prediction scope (recorded on entry)."""
    seen = []
    real = _base.use_threads

    class Watching:
        def __init__(self, work):
            self.scope = real(work)

        def __enter__(self):
            n = self.scope.__enter__()
            seen.append((n, torch.get_num_threads()))
            return n

        def __exit__(self, *exc):
            return self.scope.__exit__(*exc)

    monkeypatch.setattr(_base, "use_threads", Watching)
    return seen


@pytest.fixture
def torch_threads():
    """Torch at two threads during the test (where two cores are allowed), restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(min(2, allowed_cores()))
    yield torch.get_num_threads()
    torch.set_num_threads(before)


def _data(name):
    X, y = persistence_data(name)
    return X[::2], y[::2]  # 75 iris rows, every class


def _fit_predict(Est, name):
    X, y = _data(name)
    est = Est(**TINY[name], device="cpu", random_state=0).fit(X, y)
    out = est.predict_proba(X) if hasattr(est, "predict_proba") else est.predict(X)
    return est, out


@pytest.mark.parametrize("Est", [E for _, E in ESTIMATORS], ids=NAMES)
def test_fit_and_predict_restore_torch_threads(Est, torch_threads, watch_threads, monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    _fit_predict(Est, Est.__name__)
    assert torch.get_num_threads() == torch_threads
    assert watch_threads, "no fit or prediction ran under the thread policy"
    # iris-sized problems are far below the crossover: one thread, set for the call
    assert all(n == inside == 1 for n, inside in watch_threads)


@pytest.mark.parametrize("Est", [E for _, E in ESTIMATORS], ids=NAMES)
def test_failed_fit_restores_torch_threads(Est, torch_threads, monkeypatch):
    monkeypatch.setenv(ENV_VAR, "1")
    X, y = _data(Est.__name__)
    X = X.copy()
    X[0, 0] = np.nan
    with pytest.raises(ValueError):
        Est(**TINY[Est.__name__], device="cpu").fit(X, y)
    assert torch.get_num_threads() == torch_threads


@pytest.mark.parametrize("Est", [E for _, E in ESTIMATORS], ids=NAMES)
def test_threadpoolctl_limit_is_respected(Est, torch_threads, watch_threads, monkeypatch):
    monkeypatch.setenv(ENV_VAR, "2")  # asks for more than the limit allows
    with threadpool_limits(1):
        _fit_predict(Est, Est.__name__)
    assert watch_threads and all(inside == 1 for _, inside in watch_threads)
    assert torch.get_num_threads() == torch_threads


@pytest.mark.skipif(allowed_cores() < 2, reason="needs two cores")
@pytest.mark.parametrize("Est", [E for _, E in ESTIMATORS], ids=NAMES)
def test_environment_variable_sets_threads_and_results_agree(Est, torch_threads,
                                                              watch_threads, monkeypatch):
    """One and two threads give the same model up to round-off, amplified by a few optimiser
    steps (TINY settings): 1e-6 relative."""
    outs = []
    for n in (1, 2):
        monkeypatch.setenv(ENV_VAR, str(n))
        watch_threads.clear()
        outs.append(_fit_predict(Est, Est.__name__)[1])
        assert watch_threads and all(inside == n for _, inside in watch_threads)
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-6, atol=1e-9)


def _work(est, X):
    rows, row_work = _base.fit_work(est, X)
    return rows * row_work


def test_fit_work_measures_the_largest_operation():
    """The policy's input: an exact GP's fit is an n x n Cholesky, a network's a training step
    on ``batch_size`` rows, a Nystrom model's an n x rank solve."""
    X = np.zeros((300, 4))
    assert _work(StudentTProcessRegressor(), X) == pytest.approx(dense_work(300))
    assert _work(RichBLLRegressor(), X) == network_work(32, (4, 50, 50, 1))
    assert _work(RichBLLRegressor(batch_size=1000), X) == network_work(300, (4, 50, 50, 1))
    assert _work(MixedActivationGPRegressor(n_anchors=20), X) == low_rank_work(300, 20)
    assert _work(StudentTProcessRegressor(), [[0.0] * 4] * 10) == pytest.approx(dense_work(10))
    assert _work(StudentTProcessRegressor(), object()) == 0.0


def test_prediction_work_comes_from_the_fit(monkeypatch):
    """A prediction is sized by the row work ``fit`` kept (not by parameters changed since),
    in row blocks of at most 8,192 rows."""
    works = []

    def recording(work):
        works.append(work)
        return _real(work)

    monkeypatch.setattr(_base, "use_threads", recording)
    X, y = _data("StudentTProcessRegressor")
    est = StudentTProcessRegressor(max_iter=2, device="cpu").fit(X, y)
    assert est._row_work == pytest.approx(X.shape[0] ** 2 / 3)
    works.clear()
    est.set_params(max_iter=-1)  # invalid, and never read at predict time
    est.predict(np.zeros((10**4, X.shape[1])))
    assert works == [pytest.approx(8192 * X.shape[0] ** 2 / 3)]
