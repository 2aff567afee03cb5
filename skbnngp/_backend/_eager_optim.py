"""torch's optimisers without the import of torch's compiler on their first call.

torch marks a few optimiser methods for its compiler: ``add_param_group`` (which every
optimiser's constructor calls), ``zero_grad`` and the state dicts are wrapped so that their
first call imports ``torch._dynamo``, and Adam's ``step`` inserts compiler graph breaks,
which import it too. That import (SymPy with it) is paid once per process, by every worker
of a parallel grid search too, and costs more than a whole default fit of a few hundred
rows. Nothing in this package runs under ``torch.compile``, so
:func:`make_optimizer` builds an optimiser whose marked methods call their own bodies: the
same updates on the same state, without the import.
"""

from __future__ import annotations

import functools
import inspect

import torch

#: Methods of :class:`torch.optim.Optimizer` that torch wraps for its compiler.
_MARKED = ("add_param_group", "zero_grad", "state_dict", "load_state_dict")


@functools.cache
def eager_class(cls):
    """A subclass of the optimiser class ``cls`` whose compiler-marked methods call their
    bodies. For Adam and AdamW, ``step`` runs its body with gradients off (what torch's
    wrapper sets for a non-differentiable optimiser) and without the graph breaks; other
    optimisers keep their ``step`` (L-BFGS's only turns gradients off)."""
    namespace = {name: inspect.unwrap(getattr(cls, name)) for name in _MARKED}
    if issubclass(cls, torch.optim.Adam):
        body = inspect.unwrap(cls.step)  # under the grad-mode and graph-break wrappers

        def step(self, closure=None):
            with torch.set_grad_enabled(bool(self.defaults.get("differentiable", False))):
                return body(self, closure)

        step.__doc__ = cls.step.__doc__
        namespace["step"] = step
    namespace["__doc__"] = cls.__doc__
    namespace["eager_of"] = cls  # the torch class it stands for
    return type(cls.__name__, (cls,), namespace)


def optimizer_class(optimizer):
    """The torch optimiser class ``optimizer`` is an instance of, seeing through
    :func:`eager_class`."""
    return type(optimizer).__dict__.get("eager_of", type(optimizer))


def make_optimizer(cls, params, **options):
    """``cls(params, **options)``, an instance of :func:`eager_class` ``(cls)``."""
    return eager_class(cls)(params, **options)
