"""Probing an estimator's constructor parameters: which ones a method reads, an invalid
value and valid alternatives of each, from ``_parameter_constraints`` (used by the
fitted-state and fuzz tests)."""

from contextlib import contextmanager

from skbnngp.utils._sklearn_compat import StrOptions

#: Parameters whose alternatives are not generated here: where the model runs, how it
#: reports, its seed, and objects a user passes (a network, anchor points, a prior).
SKIP = {"device", "random_state", "verbose", "network", "anchors", "prior", "class_weight"}


@contextmanager
def watching(est):
    """Record which constructor parameters of ``est`` are read while the block runs."""
    names, seen, cls = set(est.get_params(deep=False)), set(), type(est)

    def getattribute(self, item):
        if item in names:
            seen.add(item)
        return object.__getattribute__(self, item)

    est.__class__ = type(cls.__name__, (cls,), {"__getattribute__": getattribute})
    try:
        yield seen
    finally:
        est.__class__ = cls


def invalid_value(Est, name):
    from sklearn.utils._param_validation import (
        generate_invalid_param_val,
        make_constraint,
    )

    constraints = [make_constraint(c) for c in Est._parameter_constraints[name]]
    for constraint in constraints:
        try:
            bad = generate_invalid_param_val(constraint)
        except NotImplementedError:
            continue
        if not any(c.is_satisfied_by(bad) for c in constraints):
            return bad
    return None


def alternatives(Est, name, current):
    """Valid values other than ``current``, from the parameter's constraints."""
    from sklearn.utils._param_validation import Interval, make_constraint

    out = []
    for raw in Est._parameter_constraints[name]:
        c = make_constraint(raw)
        if isinstance(c, StrOptions):
            out += [o for o in sorted(c.options) if o != current]
        elif raw == "boolean":
            out.append(not current)
        elif raw is None and current is not None:
            out.append(None)
        elif isinstance(c, Interval) and isinstance(current, (int, float)) \
                and not isinstance(current, bool):
            integral = c.type.__name__ == "Integral"
            for v in ((current + 1, current - 1) if integral else (current * 2, current / 2)):
                if c.is_satisfied_by(v) and v != current:
                    out.append(v)
                    break
    return list(dict.fromkeys(out))
