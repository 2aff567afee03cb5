"""The types a fitted skbnngp estimator needs when it is loaded with skops."""

#: Every type a fitted estimator of the package can hold, as ``module.QualName`` strings.
#: Classes only: the loader builds them with ``cls.__new__`` plus their saved attributes, or
#: with ``cls(*args)`` (the activations), and every ``__init__`` of these classes only stores
#: its arguments. No function is listed, so a file that asks the loader to call one (for
#: instance ``skbnngp.cli.main``) is refused. ``tests/test_skops_recipe.py`` checks that the
#: list is exactly what fitted estimators of every kind report.
_TRUSTED = (
    # the estimators
    "skbnngp._dbk.DBKRegressor",
    "skbnngp._fidgp.FiDGPClassifier",
    "skbnngp._mixed_activation.MixedActivationGPRegressor",
    "skbnngp._rich_bll.RichBLLRegressor",
    "skbnngp._student_t_classifier.StudentTProcessClassifier",
    "skbnngp._student_t.StudentTProcessRegressor",
    # the parameter layout of the mixed-activation GP
    "skbnngp.kernels._mixture_map.MixtureLayout",
    # the scale mixture of the Student-t process
    "skbnngp._scale_mixture.DeltaPrior",
    "skbnngp._scale_mixture.InvGammaPrior",
    "skbnngp._scale_mixture.Mixing",
    # the activations of the kernels, by name (an activation object saved on its own; a
    # fitted estimator keeps its activation as a name)
    "skbnngp.kernels._activations.Erf",
    "skbnngp.kernels._activations.LeakyReLU",
    "skbnngp.kernels._activations.ReLU",
    "skbnngp.kernels._activations.Sigmoid",
    "skbnngp.kernels._activations.Tanh",
)


def skops_trusted_types():
    """Return the types to trust when loading a fitted skbnngp estimator with skops.

    :func:`skops.io.load` builds only the types it is told to trust. Pass this list::

        import skops.io as sio
        from skbnngp.utils import skops_trusted_types

        model = sio.load("model.skops", trusted=skops_trusted_types())

    A file that holds any other type, such as a function of the package, is refused with
    :class:`skops.io.exceptions.UntrustedTypesFoundException` before anything is built.

    Returns
    -------
    list of str
        Fully qualified class names (``"module.Class"``). Only classes whose construction
        stores values; no function and no class whose construction runs code of the file.

    Notes
    -----
    Two kinds of model need more: a Student-t process whose prior is integrated by sampling
    or quadrature (``inference="snis"`` or ``"quadrature"``, which holds a scipy.stats
    distribution in ``skbnngp._scale_mixture.SampledPrior``), and a torch module or
    activation callable of your own. Add exactly the foreign types that
    :func:`skops.io.get_untrusted_types` reports for them after you have checked each one.
    """
    return list(_TRUSTED)
