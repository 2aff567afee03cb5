"""GridSearchCV over a dask.distributed LocalCluster gives the same results as n_jobs=1."""

import numpy as np
import pytest
from sklearn.datasets import load_iris
from sklearn.model_selection import GridSearchCV

from skbnngp import StudentTProcessClassifier, StudentTProcessRegressor

distributed = pytest.importorskip("distributed")
joblib = pytest.importorskip("joblib")

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None, silence_logs=50)
    c = distributed.Client(cluster)
    yield c
    c.close()
    cluster.close()


def _searches():
    X, y = load_iris(return_X_y=True)
    reg = (StudentTProcessRegressor(max_iter=10, device="cpu", random_state=0),
           {"depth": [1, 2], "alpha": [1e-2, 1e-1]}, X[:, :3], X[:, 3])
    clf = (StudentTProcessClassifier(max_iter=5, device="cpu", random_state=0),
           {"depth": [1, 3]}, X, y)
    return [reg, clf]


@pytest.mark.parametrize("case", [0, 1], ids=["regressor", "classifier"])
def test_grid_search_on_a_local_cluster_matches_serial(client, case):
    est, grid, X, y = _searches()[case]
    serial = GridSearchCV(est, grid, cv=3, n_jobs=1).fit(X, y)
    with joblib.parallel_backend("dask"):
        remote = GridSearchCV(est, grid, cv=3).fit(X, y)
    assert len(client.scheduler_info()["workers"]) == 2
    for key in serial.cv_results_:
        if key.endswith("_time"):
            continue
        a, b = serial.cv_results_[key], remote.cv_results_[key]
        if key == "params" or key.startswith("param_") or key.startswith("rank_"):
            assert list(a) == list(b), key
        else:  # workers run one BLAS thread, the parent two: sums differ in the last bits
            np.testing.assert_allclose(np.asarray(a, float), np.asarray(b, float), rtol=1e-9,
                                       atol=0, err_msg=key)
    assert serial.best_params_ == remote.best_params_
    np.testing.assert_array_equal(serial.predict(X), remote.predict(X))
