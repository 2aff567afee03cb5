"""Clear messages for bad targets (issue 18, item 6): class labels of mixed types, a
``class_weight`` that names no class or weighs one negatively, and a ``partial_fit`` y whose
shape differs from the first call's."""

import numpy as np
import pytest

from skbnngp import DBKRegressor, FiDGPClassifier, StudentTProcessClassifier
from skbnngp._base import check_class_labels

CLASSIFIERS = [
    (StudentTProcessClassifier, dict(max_iter=2)),
    (FiDGPClassifier, dict(hidden_layer_sizes=(8,), max_iter=2)),
]


def _X(n=8):
    return np.random.default_rng(0).normal(size=(n, 2))


@pytest.mark.parametrize("Est,params", CLASSIFIERS, ids=lambda c: getattr(c, "__name__", ""))
@pytest.mark.parametrize("labels,types", [
    (["a", 1, "b", 2, "a", 1, "b", 2], "str and int"),
    ([1.5, "x", 1.5, "x", 1.5, "x", 1.5, "x"], "str and float"),
    ([None, 1, None, 1, None, 1, None, 1], "int and NoneType"),
])
def test_mixed_label_types_are_refused_naming_y(Est, params, labels, types):
    y = np.array(labels, dtype=object)
    with pytest.raises(TypeError, match=f"y has class labels of mixed types: {types}"):
        Est(**params).fit(_X(), y)


@pytest.mark.parametrize("Est,params", CLASSIFIERS, ids=lambda c: getattr(c, "__name__", ""))
def test_labels_of_one_type_still_fit(Est, params):
    X = _X()
    for y in (np.array(["a", "b"] * 4, dtype=object), np.array([3, 1] * 4),
              np.array([True, False] * 4)):
        clf = Est(random_state=0, **params).fit(X, y)
        assert len(clf.classes_) == 2 and set(clf.predict(X)) <= set(clf.classes_)


@pytest.mark.parametrize("Est,params", CLASSIFIERS, ids=lambda c: getattr(c, "__name__", ""))
@pytest.mark.parametrize("weights,message", [
    ({"A": 2.0}, r"class_weight has keys \['A'\] that are not classes of y"),
    ({"a": 1.0, "b": 1.0, "c": 3.0}, r"keys \['c'\] that are not classes"),
    ({"a": -1.0}, "class_weight values must be finite and non-negative"),
    ({"b": np.nan}, "class_weight values must be finite and non-negative"),
])
def test_class_weight_naming_no_class_is_refused(Est, params, weights, message):
    # a misspelt label used to leave its class unweighted without a word
    y = np.array(["a", "b"] * 4)
    with pytest.raises(ValueError, match=message):
        Est(class_weight=weights, **params).fit(_X(), y)


@pytest.mark.parametrize("Est,params", CLASSIFIERS, ids=lambda c: getattr(c, "__name__", ""))
def test_class_weight_dict_of_some_classes_still_weighs_them(Est, params):
    # a class left out of the dict keeps weight 1; a heavier class pulls the predictions
    X, y = _X(40), np.array(["a", "b"] * 20)
    plain = Est(random_state=0, **params).fit(X, y).predict_proba(X)[:, 1].mean()
    heavy = Est(random_state=0, class_weight={"b": 20.0}, **params).fit(X, y)
    assert heavy.predict_proba(X)[:, 1].mean() > plain


def test_check_class_labels_passes_plain_arrays():
    for y in (np.arange(4), np.array(["a", "b"]), np.array([1.0, 2.0]), [0, 1],
              np.array([np.int64(1), 2, np.float32(3.0)], dtype=object)):
        check_class_labels(y)
    with pytest.raises(TypeError, match="mixed types: str and int"):
        check_class_labels(np.array([1, "a"], dtype=object))
    with pytest.raises(TypeError, match="mixed types: str and bytes"):
        check_class_labels(np.array([b"a", "a"], dtype=object))


def test_partial_fit_names_both_shapes_of_y():
    """The message said "y has 1 target(s), the model was started with 1"."""
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(40, 2)), rng.normal(size=40)
    reg = DBKRegressor(n_basis=4, hidden_layer_sizes=(8,), inference="svi", batch_size=20,
                       random_state=0).partial_fit(X, y)
    with pytest.raises(ValueError, match=r"y has shape \(40, 1\), but the model was started "
                                         r"with y of shape \(n_samples,\)"):
        reg.partial_fit(X, y[:, None])
    with pytest.raises(ValueError, match=r"y has shape \(40, 2\).*\(n_samples,\)"):
        reg.partial_fit(X, np.c_[y, y])
    col = DBKRegressor(n_basis=4, hidden_layer_sizes=(8,), inference="svi", batch_size=20,
                       random_state=0).partial_fit(X, y[:, None])
    with pytest.raises(ValueError, match=r"y has shape \(40,\), but the model was started "
                                         r"with y of shape \(n_samples, 1\)"):
        col.partial_fit(X, y)
    reg.partial_fit(X, y)  # the refused calls changed nothing
    assert reg.n_samples_seen_ == 80
