"""The skops recipe of the user guide, ``sio.load(path, trusted=skops_trusted_types())``
(issue 18, item 1): it loads every fitted estimator, and it refuses a file that asks the loader
to call a function of the package, such as ``skbnngp.cli.main``, before anything runs."""

import inspect
import io
import json
import warnings
import zipfile
from importlib import import_module

import numpy as np
import pytest

from skbnngp import (
    FiDGPClassifier,
    MixedActivationGPRegressor,
    RichBLLRegressor,
    StudentTProcessClassifier,
    StudentTProcessRegressor,
)
from skbnngp.utils import all_estimators, skops_trusted_types

from .conftest import (
    MODES,
    TINY,
    assert_same_outputs,
    persistence_data,
    predictive_outputs,
)

sio = pytest.importorskip("skops.io")
from skops.io.exceptions import UntrustedTypesFoundException

#: Every kind of fitted model: each estimator with each inference mode, and every choice of
#: the parameters that put objects of the package into the fitted state (activations, priors).
KINDS = [(Est, {**TINY.get(name, {}), **mode}) for name, Est in all_estimators()
         for mode in MODES.get(name, [{}])]
KINDS += [(StudentTProcessRegressor, {"max_iter": 2, "activation": a})
          for a in ("erf", "leaky_relu", "tanh", "sigmoid")]
KINDS += [(StudentTProcessRegressor, {"max_iter": 2, "prior": "gaussian"}),
          (StudentTProcessClassifier, {"max_iter": 2, "activation": "tanh"}),
          (MixedActivationGPRegressor, {"n_anchors": 10, "max_iter": 2,
                                        "activations": ("tanh", "sigmoid", "relu",
                                                        "leaky_relu")})]


def _fit(Est, params, dtype="float64"):
    X, y = persistence_data(Est.__name__)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = Est(device="cpu", random_state=0, dtype=dtype, **params).fit(X, y)
    return est, X


def _kind_id(kind):
    Est, params = kind
    return Est.__name__ + "-" + "-".join(f"{k}={v}" for k, v in params.items()
                                         if k not in ("max_iter",))


@pytest.fixture(scope="module")
def fitted():
    return {_kind_id(k): _fit(*k) for k in KINDS}


#: The kernel activations: trusted for an activation saved on its own
#: (``test_quadrature_activations_pickle_as_their_class``); a fitted estimator keeps its
#: ``activation`` parameter as a name and holds no activation object.
ACTIVATIONS = {f"skbnngp.kernels._activations.{name}"
               for name in ("Erf", "LeakyReLU", "ReLU", "Sigmoid", "Tanh")}


def test_trusted_types_are_exactly_what_fitted_estimators_need(fitted):
    needed = set()
    for est, _ in fitted.values():
        needed |= set(sio.get_untrusted_types(data=sio.dumps(est)))
    assert ACTIVATIONS <= set(skops_trusted_types())
    assert sorted(needed) == sorted(set(skops_trusted_types()) - ACTIVATIONS)


def test_trusted_types_are_classes_only():
    types = skops_trusted_types()
    assert len(types) == len(set(types))
    for path in types:
        module, _, name = path.rpartition(".")
        obj = getattr(import_module(module), name)
        assert inspect.isclass(obj), path
    assert "skbnngp.cli.main" not in types
    # a fresh list each call: a caller appending to it changes nothing for the next one
    skops_trusted_types().append("skbnngp.cli.main")
    assert "skbnngp.cli.main" not in skops_trusted_types()


@pytest.mark.parametrize("kind", KINDS, ids=[_kind_id(k) for k in KINDS])
def test_recipe_round_trips_every_estimator(kind, fitted, tmp_path):
    est, X = fitted[_kind_id(kind)]
    path = tmp_path / "model.skops"
    sio.dump(est, path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        before = predictive_outputs(est, X)
        loaded = sio.load(path, trusted=skops_trusted_types())
        after = predictive_outputs(loaded, X)
    assert type(loaded) is type(est)
    assert_same_outputs(after, before, "float64")


def test_quadrature_activations_pickle_as_their_class():
    """Tanh and Sigmoid are rebuilt from their class, so no function is stored."""
    import pickle

    from skbnngp.kernels import Sigmoid, Tanh

    for act in (Tanh(n_quadrature=17), Sigmoid()):
        for clone in (pickle.loads(pickle.dumps(act)),
                      sio.loads(sio.dumps(act), trusted=skops_trusted_types())):
            assert type(clone) is type(act) and clone == act
            assert clone.function is act.function and clone.derivative is act.derivative
        assert sio.get_untrusted_types(data=sio.dumps(act)) == [
            f"skbnngp.kernels._activations.{type(act).__name__}"]


# --------------------------------------------------------------------------- tampered files
def _schema(data):
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return {n: z.read(n) for n in z.namelist()}


def _pack(files):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, content in files.items():
            z.writestr(name, content)
    return buf.getvalue()


def _json_str(value):
    return {"__class__": "str", "__module__": "builtins", "__loader__": "JsonNode",
            "content": json.dumps(value), "is_json": True, "__id__": 1}


def _call_node(module, name, args):
    """A node that makes the loader call ``module.name(*args)`` (what skops writes for an
    object whose ``__reduce__`` is ``(type(obj), args)``)."""
    return {"__class__": name, "__module__": module, "__loader__": "ConstructorFromReduceNode",
            "content": {"__class__": "tuple", "__module__": "builtins",
                        "__loader__": "TupleNode", "content": [
                            {"__class__": "list", "__module__": "builtins",
                             "__loader__": "ListNode", "content": [_json_str(a) for a in args],
                             "__id__": 2}], "__id__": 3}, "__id__": 4}


def _tampered(out_dir):
    """A genuine fitted model whose state has one more attribute: a call of
    ``skbnngp.cli.main(["compare", "iris", ..., "-o", out_dir])``."""
    est, _ = _fit(StudentTProcessRegressor, {"max_iter": 2})
    files = _schema(sio.dumps(est))
    schema = json.loads(files["schema.json"])
    args = ["compare", "iris", "-e", "gpr", "--folds", "2", "--time-budget", "0", "-q",
            "--n-jobs", "1", "-o", str(out_dir)]
    schema["content"]["content"]["payload_"] = _call_node("skbnngp.cli", "main", args)
    files["schema.json"] = json.dumps(schema)
    return _pack(files)


def test_recipe_refuses_a_file_that_calls_a_package_function(tmp_path):
    out_dir = tmp_path / "written-by-the-file"
    data = _tampered(out_dir)
    path = tmp_path / "tampered.skops"
    path.write_bytes(data)
    # the old advice (trust what get_untrusted_types reports if it all starts with skbnngp.)
    # would have trusted the call:
    reported = sio.get_untrusted_types(file=path)
    assert "skbnngp.cli.main" in reported
    assert all(t.startswith("skbnngp.") for t in reported)
    with pytest.raises(UntrustedTypesFoundException, match="skbnngp.cli.main"):
        sio.load(path, trusted=skops_trusted_types())
    with pytest.raises(UntrustedTypesFoundException):
        sio.loads(data, trusted=skops_trusted_types())
    assert not out_dir.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tampered.skops"]


@pytest.mark.parametrize("target", ["skbnngp.utils.discovery.all_estimators",
                                    "skbnngp.datasets.load_dataset",
                                    "skbnngp.kernels._activations.get_activation"])
def test_recipe_refuses_any_package_function(target, tmp_path):
    """A function node or a call node naming any function of the package is refused."""
    est, _ = _fit(StudentTProcessRegressor, {"max_iter": 2})
    files = _schema(sio.dumps(est))
    schema = json.loads(files["schema.json"])
    module, _, name = target.rpartition(".")
    schema["content"]["content"]["call_"] = _call_node(module, name, ["x"])
    schema["content"]["content"]["function_"] = {
        "__class__": name, "__module__": module, "__loader__": "TypeNode", "__id__": 5}
    files["schema.json"] = json.dumps(schema)
    with pytest.raises(UntrustedTypesFoundException, match=name):
        sio.loads(_pack(files), trusted=skops_trusted_types())


# the estimators the recipe covers are all the public ones
def test_kinds_cover_every_public_estimator():
    covered = {Est for Est, _ in KINDS}
    assert covered == {Est for _, Est in all_estimators()}
    assert {FiDGPClassifier, RichBLLRegressor} <= covered


def test_a_loaded_file_cannot_ask_for_unbounded_work():
    """Issue 53 item 4: a trusted ``Tanh`` node carrying ``n_quadrature=20000`` made predict
    never return, and a network plan of 6000-wide layers was built (830 MB) before its
    weights were checked. The activation is bounded when it is made (every load path calls
    its constructor), and a plan is checked against its weights before anything is built."""
    import pickle

    from skbnngp import RichBLLRegressor
    from skbnngp.kernels import Tanh
    from skbnngp.kernels._activations import MAX_QUADRATURE

    with pytest.raises(ValueError, match="n_quadrature must be an integer in"):
        Tanh(MAX_QUADRATURE + 1)
    blob = pickle.dumps(Tanh(40), protocol=2).replace(b"K(", b"M\x20N", 1)  # 40 -> 20000
    with pytest.raises(ValueError, match="n_quadrature"):
        pickle.loads(blob)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 2))
    model = RichBLLRegressor(max_iter=3, hidden_layer_sizes=(8,), random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(X, X[:, 0])
    state = model.__getstate__()
    state["network_"]["mlp_plan"]["hidden_layer_sizes"] = [6000, 6000]
    with pytest.raises(ValueError, match="plan does not match its weights"):
        RichBLLRegressor().__setstate__(state)


@pytest.mark.parametrize("key, value, match", [
    ("_X_offset", lambda v: v[:1], "_X_offset has shape"),
    ("_y_train_std", lambda v: np.r_[v, v], "_y_train_mean / _y_train_std"),
    ("calibration_factor_", lambda v: -1.0, "calibration_factor_=-1.0 is not a positive"),
])
def test_tampered_fitted_attributes_are_refused_naming_them(key, value, match):
    """Issue 53 item 7: attributes of the wrong shape broadcast silently on load (predictions
    moved by 0.004-0.12), and a negative calibration factor gave std 0."""
    import pickle

    from skbnngp import StudentTProcessRegressor

    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 3))
    model = StudentTProcessRegressor(max_iter=5, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(X, X[:, 0])
    state = model.__getstate__()
    state[key] = value(np.asarray(state[key]))
    with pytest.raises(ValueError, match=match):
        StudentTProcessRegressor().__setstate__(state)
    pickle.loads(pickle.dumps(model))  # the untouched state loads


def _fidgp_fitted():
    """A tiny FiD-GP whose first layer is dense and whose second is an inducing layer with a
    flow (both kinds of layer a plan describes)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return FiDGPClassifier(max_iter=2, hidden_layer_sizes=(8,), fid_layers=[1],
                               device="cpu", random_state=0).fit(X, (X[:, 0] > 0).astype(int))


@pytest.mark.parametrize("edit, match", [
    (lambda p: p.update(widths=[2, 6000, 2]), "layers.0.weight: plan"),
    (lambda p: p.update(widths=[6000, 8, 2]), "layers.0.weight: plan"),
    (lambda p: p.update(shapes=[None, (2, 6001)]), "inducing shape"),
    (lambda p: p.update(shapes=[None, (2, 5)]), "layers.1.z_col: plan"),
    (lambda p: p.update(flow_length=5000), "the plan has 5000 flow steps"),
    (lambda p: p.update(flow_hidden=100000), "hyper.0.bias: plan"),
    (lambda p: p.update(shapes=[None]), "one per linear layer"),
    (lambda p: p.update(shapes=[None, 7]), "inducing shape 7"),
    (lambda p: p.update(widths="8"), "not a list of positive integers"),
])
def test_fidgp_plan_is_checked_against_its_weights_before_building(edit, match, monkeypatch):
    """Issue 53 item 4: a FiD-GP file whose network plan asks for more than its weights hold
    (6000-wide layers, a huge flow) is refused naming ``model_plan_`` before any layer is
    built; the untouched state still loads."""
    import pickle

    from skbnngp._backend import _fid_network

    model = _fidgp_fitted()
    state = model.__getstate__()
    state["model_plan_"] = plan = dict(state["model_plan_"])  # the model's own is shared
    edit(plan)

    def no_build(*args, **kwargs):
        raise AssertionError("a network was built from an unchecked plan")

    monkeypatch.setattr(_fid_network, "build_network", no_build)
    with pytest.raises(ValueError, match=f"FiDGPClassifier: the saved model_plan_ .*{match}"):
        FiDGPClassifier().__setstate__(state)
    monkeypatch.undo()
    pickle.loads(pickle.dumps(model))


def test_fidgp_trusted_file_with_wide_layers_is_refused(tmp_path):
    """The same through the skops recipe: a trusted-type file whose plan's hidden width reads
    6000 over 8-wide weights fails to load with the ValueError (nothing of 6000 is built)."""
    model = _fidgp_fitted()
    files = _schema(sio.dumps(model))
    schema = json.loads(files["schema.json"])
    widths = schema["content"]["content"]["model_plan_"]["content"]["widths"]["content"]
    assert widths[1]["content"] == "8"
    widths[1].update(content="6000", __id__=1)  # its own id (skops memoises the 8s by id)
    files["schema.json"] = json.dumps(schema)
    with pytest.raises(ValueError, match="model_plan_ does not match the saved weights"):
        sio.loads(_pack(files), trusted=skops_trusted_types())
