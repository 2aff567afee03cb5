"""The repeatability promise of the package, as the tests assert it.

The README and the user guide ("Saving and loading fitted models") state it in words:

* The predictions of one fitted model (means, standard deviations, covariances,
  probabilities, OOD scores) after a pickle, joblib or skops round trip, in another process,
  with another thread count, or for an input in another memory layout, agree with the
  original to ``RTOL[dtype]`` times the largest magnitude of that output: 1e-10 in float64
  and 1e-4 in float32. Threaded BLAS (MKL) splits sums by thread count and memory
  alignment, so such results agree to round-off, not bit for bit.
* Repeated calls on one fitted model, in one process with an unchanged thread count, give
  the same results; so does the same fit (same data, same ``random_state``) repeated in one
  process. Those tests may compare exactly.

The tolerance is relative to each output's scale (its largest finite magnitude), not
element by element: an element that is zero up to round-off has no meaningful relative
error. It is tight enough to catch a changed hyperparameter, a cache rebuilt with other
jitter, or a refit (``test_promise_catches_a_changed_model`` shows it). scikit-learn's own
``check_estimators_pickle`` allows ``rtol=1e-7, atol=1e-9`` per element, in one process: this
is tighter for every output whose scale is at most 10.
"""

import numpy as np

#: Allowed difference, relative to the largest magnitude of the output, per dtype.
RTOL = {"float64": 1e-10, "float32": 1e-4}


def assert_same_predictions(actual, desired, dtype="float64", err_msg=""):
    """Assert that two float outputs of one fitted model agree under the promise."""
    actual = np.asarray(actual, dtype=np.float64)
    desired = np.asarray(desired, dtype=np.float64)
    assert actual.shape == desired.shape, (err_msg, actual.shape, desired.shape)
    finite = np.isfinite(desired)
    np.testing.assert_array_equal(np.isfinite(actual), finite, err_msg=f"{err_msg}: non-finite")
    np.testing.assert_array_equal(actual[~finite], desired[~finite], err_msg=err_msg)
    scale = float(np.abs(desired[finite]).max()) if finite.any() else 0.0
    np.testing.assert_allclose(actual[finite], desired[finite], rtol=0,
                               atol=RTOL[str(dtype)] * max(scale, np.finfo(np.float64).tiny),
                               err_msg=err_msg)


def assert_same_labels(actual, desired, proba, dtype="float64", err_msg=""):
    """Assert that predicted labels agree wherever the top two probabilities are further apart
    than the promise (a tie within round-off may break either way)."""
    proba = np.asarray(proba, dtype=np.float64)
    if proba.shape[1] < 2:
        clear = np.ones(len(proba), dtype=bool)
    else:
        top2 = np.sort(proba, axis=1)[:, -2:]
        clear = (top2[:, 1] - top2[:, 0]) > 2 * RTOL[str(dtype)]
    np.testing.assert_array_equal(np.asarray(actual)[clear], np.asarray(desired)[clear],
                                  err_msg=err_msg)
