"""The training rows: sample weights, repeated rows, replicates and held-out splits.

Every estimator reads its rows through these: ``sample_weight`` is checked
(:func:`check_weights`), exact repeats of ``(x, y)`` are merged into one weighted row
(:func:`collapse_rows`), the merged rows are read as replicates of a design or as data given
several times (:func:`rows_replicate`), and the validation rows are drawn accordingly
(:func:`held_out_split`). The warnings about weights that make a fit count the data as more
or fewer observations than it has are here too.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from ._base import plain


def duplicate_groups(X):
    """Index arrays of the rows of ``X`` that repeat one input, one array per repeated
    input (rows that occur once are in none); an empty list when every row is unique."""
    X = np.asarray(X)
    if X.shape[0] < 2:
        return []
    _, inverse, counts = np.unique(X, axis=0, return_inverse=True, return_counts=True)
    inverse = inverse.ravel()
    if counts.max() < 2:
        return []
    order = np.argsort(inverse, kind="stable")
    bounds = np.cumsum(counts)[:-1]
    return [g for g in np.split(order, bounds) if g.size > 1]


def check_weights(X, sample_weight):
    """``sample_weight`` as a float64 vector of ``X``'s rows (sklearn's
    ``_check_sample_weight``: a ValueError naming it when negative, non-finite or of the
    wrong length), or None."""
    if sample_weight is None:
        return None
    from sklearn.utils.validation import _check_sample_weight

    w = _check_sample_weight(sample_weight, X, dtype=np.float64)
    if np.any(w < 0):
        raise ValueError("Negative values in data passed to sample_weight.")
    if not np.all(np.isfinite(w)):
        raise ValueError("sample_weight must be finite.")
    if not w.sum() > 0:
        raise ValueError("sample_weight must have a positive sum (every weight is 0).")
    return w


def distinct_rows(X, y, sample_weight):
    """The rows of ``(X, y)`` that :func:`collapse_rows` keeps, as ``(index, w)``.

    ``index`` holds the row of each distinct ``(x, y)`` of positive weight (its first
    occurrence; lexicographic order) and ``w`` their summed weights; ``w`` is None when the
    kept rows are distinct and every weight is 1 (``index`` then keeps the rows' order), and
    ``(None, None)`` stands for every row, once, as it is. ``X`` is a numeric array; ``y``
    may have one or two dimensions.
    """
    n = X.shape[0]
    Y = np.asarray(y).reshape(n, -1)
    if sample_weight is None:
        if n < 2 or np.unique(np.hstack([X, Y]), axis=0).shape[0] == n:
            return None, None
        sample_weight = np.ones(n)
    keep = np.flatnonzero(sample_weight > 0)
    w = sample_weight[keep]
    _, first, inverse = np.unique(np.hstack([X, Y])[keep], axis=0, return_index=True,
                                  return_inverse=True)
    if np.all(w == 1) and first.size == keep.size:
        return keep, None
    return keep[first], np.bincount(inverse.ravel(), weights=w, minlength=first.size)


def collapse_rows(X, y, sample_weight):
    """The training rows as distinct ``(x, y)`` rows with summed weights: ``(X, y, w)``.

    Rows of weight 0 are dropped, exact duplicates of ``(x, y)`` are merged into one row
    whose weight is their count (or summed weight), and the rows are put in lexicographic
    order, so that integer weights and the rows repeated that many times (in any order)
    give the identical training problem. With ``sample_weight=None`` and no duplicated
    row, ``(X, y, None)`` is returned unchanged, so an unweighted fit of distinct rows is
    exactly what it was; so are distinct rows whose positive weights are all 1 (the rows
    of weight 0 dropped, the order kept): unit weights are no weights, which a network's
    training (its mini-batch order) can tell apart from sorted rows. ``y`` may have one or
    two dimensions.
    """
    index, w = distinct_rows(X, y, sample_weight)
    if index is None:
        return X, y, None
    return X[index], np.asarray(y)[index], w


#: A fitted noise within this factor of its lower bound counts as on the bound.
NOISE_AT_BOUND = 1.01


def warn_repeated_noise(estimator, weights, noise, bounds, name):
    """Warn that repeated rows may have pushed a GP's noise to its lower bound.

    ``weights`` are the training rows' frequency weights after :func:`collapse_rows` (None:
    every distinct row once), ``noise`` the fitted value of the noise hyperparameter
    ``name`` and ``bounds`` its ``(low, high)`` box (``"fixed"``: not fitted). Under
    frequency weights a row of weight ``w`` is ``w`` identical observations, whose
    likelihood favours a smaller noise by a factor ``noise^-(w - 1) / 2``: with total weight
    above the number of distinct rows that pressure can drive the noise to its bound and
    the model to interpolate. A UserWarning says so when it happened.
    """
    if weights is None or isinstance(bounds, str):
        return
    total, n = float(np.sum(weights)), len(weights)
    if total <= n * (1 + 1e-9) or noise > bounds[0] * NOISE_AT_BOUND:
        return
    warnings.warn(
        f"{type(estimator).__name__}: the fitted noise ({name}={noise:.3g}) is at its lower "
        f"bound, and the {n} distinct training rows count {total:.6g} times (repeated "
        "(x, y) rows or sample_weight above 1). As frequency weights, repeated identical "
        "targets are evidence of no noise, so the model interpolates and its predictive "
        "may be far off between the rows. If the weights are importances rather than "
        "counts, divide sample_weight by the mean of its non-zero entries (zero-weight "
        "rows are dropped); if the target is noiseless, ignore this.",
        UserWarning, stacklevel=3)


#: Mean frequency weight of the distinct training rows below which a fit warns that the
#: data count as far fewer observations than rows (normalised or probability weights).
LIGHT_WEIGHT_MEAN = 0.25


def warn_light_weights(estimator, weights):
    """Warn when the training rows' frequency ``weights`` (after :func:`collapse_rows`; None:
    every row once) average below :data:`LIGHT_WEIGHT_MEAN`: the likelihood then counts the
    data as ``sum(w)`` observations, so the model leans on its prior (a flatter fit, wider
    intervals), which weights normalised to sum to 1 make silently."""
    if weights is None:
        return
    total, n = float(np.sum(weights)), len(weights)
    if total >= LIGHT_WEIGHT_MEAN * n:
        return
    warnings.warn(
        f"{type(estimator).__name__}: sample_weight averages {total / n:.3g} over the {n} "
        f"distinct training rows: as frequency weights the data count as {total:.3g} "
        "observations, so the model leans on its prior (a flatter fit, wider intervals). If "
        "the weights are importances rather than counts, divide sample_weight by the mean "
        "of its non-zero entries.",
        UserWarning, stacklevel=4)


#: A column with two values warns when the rarer one is on fewer than ``RARE_VALUE_ROWS``
#: distinct training rows and at most ``RARE_VALUE_SHARE`` of them: where the network
#: estimators' coverage of inputs with the rare value fell far below nominal in the
#: measurement behind it (doc/whats_new.rst, rare categories).
RARE_VALUE_ROWS, RARE_VALUE_SHARE = 20, 0.05


def warn_rare_binary_values(estimator, X, sample_weight=None):
    """Warn when a column of ``X`` (distinct training rows) takes two values and the rarer
    one is on only a handful of rows of positive weight: a trained network can fit those
    rows and carry a spurious effect to every new input with that value, where its
    predictive can be far off and its calibration, read on rows like the training rows,
    does not see it. For the network regressors; FiD-GP's usual inputs (images, sparse
    counts) hold many such columns, where the warning would say nothing new."""
    X = np.asarray(X)
    if sample_weight is not None:
        X = X[np.asarray(sample_weight) > 0]
    n = X.shape[0]
    if n < 2:
        return
    lo, hi = X.min(axis=0), X.max(axis=0)
    at_lo = (X == lo).sum(axis=0)
    two = (lo < hi) & (at_lo + (X == hi).sum(axis=0) == n)
    rare = np.minimum(at_lo, n - at_lo)
    cols = np.flatnonzero(two & (rare < RARE_VALUE_ROWS) & (rare <= RARE_VALUE_SHARE * n))
    if cols.size == 0:
        return
    shown = ", ".join(f"{j} ({rare[j]} rows)" for j in cols[:5])
    more = f" and {cols.size - 5} more" if cols.size > 5 else ""
    warnings.warn(
        f"{type(estimator).__name__}: column(s) {shown}{more} of X take one of their two "
        "values on only a few training rows. A trained network can fit those rows and "
        "carry a spurious effect to every new input with that value, where its predictions "
        "and intervals can be far off; the calibration reads rows like the training rows "
        "and does not see it (User Guide: rare categories and sparse regions). Check such "
        "inputs on a split that holds those rows out, or merge the rare value.",
        UserWarning, stacklevel=5)


def network_weights(estimator, X, y, sample_weight):
    """A network's training rows: ``sample_weight`` checked (:func:`check_weights`) and the
    rows merged by :func:`collapse_rows`, so that integer weights and the rows repeated in
    any order give one training problem (the networks' mini-batches included). Returns
    ``(X, y, w)``, ``w`` None when every row counts once. A ValueError names
    ``sample_weight`` when fewer than 2 distinct rows of positive weight remain, and
    :func:`warn_light_weights` warns of weights far below 1."""
    X, y, w = collapse_rows(X, y, check_weights(X, sample_weight))
    if X.shape[0] < 2:
        raise ValueError(f"{type(estimator).__name__} needs at least 2 distinct rows of "
                         f"positive sample_weight; got {X.shape[0]}.")
    warn_light_weights(estimator, w)
    return X, y, w


#: The held-out split keeps the rows of one input together when at least this share of the
#: rows have an input of their own: a new row's input is then most likely unseen (the
#: Good-Turing estimate), and a held-out row whose input was trained on would look easier
#: than one. Below it the inputs recur (categories, a design of replicates), a new row's
#: input was most likely seen, and rows are held out one by one, so that every input is
#: trained on.
UNIQUE_INPUT_SHARE = 0.5


#: Merged rows that stand for at least this many copies on average (integer weights), and
#: for at least as many as there are distinct rows, are replicates (a design of a few cells
#: that each hold one value), not a data set given several times over, which keeps its many
#: distinct rows (split copy by copy, its validation rows would repeat its training rows and
#: narrow the intervals; measured in doc/whats_new.rst).
REPLICATE_COPIES = 5.0


def rows_replicate(groups, n, weights=None):
    """Whether the rows are replicates of a design rather than distinct observations.

    ``n`` rows are the distinct ``(x, y)`` left once exact repeats are merged (``weights``:
    their summed weights, None: once each), so data given twice is not a design; ``groups``
    are their :func:`duplicate_groups`. True when fewer than :data:`UNIQUE_INPUT_SHARE` of
    the rows have an input of their own (a categorical design), or when integer weights
    average at least :data:`REPLICATE_COPIES` copies a row and at least ``n`` (a few cells
    observed many times: categories of a single value each).
    """
    if bool(groups) and n - sum(len(g) for g in groups) < UNIQUE_INPUT_SHARE * n:
        return True
    if weights is None:
        return False
    w = np.asarray(weights, dtype=np.float64)
    return bool(np.all(w == np.round(w)) and w.mean() >= max(REPLICATE_COPIES, n))


def held_out_split(estimator, n, rng, fraction, X=None, weights=None):
    """``(train_rows, validation_rows, train_weights, validation_weights)``: sorted index
    arrays, ``ceil(fraction n)`` rows held out at random, and the rows' frequency weights
    on each side (None without ``weights``); every row and None when ``fraction`` is None
    (no early stopping).

    The rows are a network's training rows after :func:`network_weights`, which merges exact
    repeats of ``(x, y)`` into one weighted row. With ``X``, rows that share an input (whose
    targets differ) stay on one side when at least :data:`UNIQUE_INPUT_SHARE` of the rows
    have an input of their own; where the rows are replicates of a design
    (:func:`rows_replicate`: inputs that recur more than that, or many copies a row), they
    are split like any other rows, since holding out every row of an input leaves it
    untrained (a whole category of a categorical design; measured in doc/whats_new.rst),
    and a merged row of integer weight ``w >= 2`` counts as ``w`` rows whose copies are
    split one by one (held out whole, its value was missing from its category's training
    rows); such a row can then be on both sides, with part of its weight on each. Without
    repeated inputs the split is the same as without ``X``. Raises a ValueError naming
    ``validation_fraction`` when nothing would be left to train on.
    """
    w = None if weights is None else np.asarray(weights, dtype=np.float64)
    if fraction is None:
        return np.arange(n), None, w, None
    n_val = int(math.ceil(fraction * n))
    if n - n_val < 1:
        raise ValueError(f"{type(estimator).__name__}: validation_fraction={plain(fraction)} "
                         f"of {n} rows leaves no training rows; lower it or set "
                         "early_stopping=False.")
    groups = duplicate_groups(X) if X is not None else []
    if X is not None and rows_replicate(groups, n, w):
        groups = []  # replicates: rows one by one
        whole = None if w is None else np.round(w)
        if whole is not None and np.any((whole == w) & (whole >= 2)):
            return _split_copies(rng, fraction, w, np.where((whole == w) & (whole >= 2),
                                                            whole, 0).astype(np.int64))
    if not groups:
        perm = rng.permutation(n)
        tr, va = np.sort(perm[n_val:]), np.sort(perm[:n_val])
        return tr, va, None if w is None else w[tr], None if w is None else w[va]
    # one unit per distinct input (first occurrence order), units drawn in random order
    _, first, inverse, counts = np.unique(np.asarray(X), axis=0, return_index=True,
                                          return_inverse=True, return_counts=True)
    by_first = np.argsort(first)  # units in first-occurrence order
    members = np.split(np.argsort(inverse.ravel(), kind="stable"), np.cumsum(counts)[:-1])
    members = [members[u] for u in by_first]  # O(n log n): no scan of every row per unit
    taken, val = 0, []
    for u in rng.permutation(first.size):
        if taken >= n_val:
            break
        val.append(members[u])
        taken += members[u].size
    val = np.sort(np.concatenate(val))
    if n - val.size < 1:
        raise ValueError(f"{type(estimator).__name__}: validation_fraction={plain(fraction)} "
                         f"leaves no training rows once repeated rows are kept together; "
                         "lower it or set early_stopping=False.")
    tr = np.setdiff1d(np.arange(n), val)
    return tr, val, None if w is None else w[tr], None if w is None else w[val]


#: Above this many copies in all, a split draws how many of each row's copies it holds out
#: (:func:`draw_copies`) instead of listing every copy (aggregated counts can reach 10^9).
MAX_LISTED_COPIES = 10**6


def draw_copies(rng, counts, k):
    """How many of each row's ``counts`` copies a draw of ``k`` copies without replacement
    takes: ``k`` of the listed copies in random order, or, beyond
    :data:`MAX_LISTED_COPIES` copies, one row at a time (hypergeometric draws; binomial ones
    past numpy's 10^9 limit, clipped so that the total is ``k``). ``rng``: a RandomState or
    Generator."""
    counts = np.asarray(counts, dtype=np.int64)
    if counts.sum() <= MAX_LISTED_COPIES:
        units = np.repeat(np.arange(counts.size), counts)
        return np.bincount(rng.permutation(units)[:k], minlength=counts.size)
    take, left, rest = np.zeros_like(counts), int(k), int(counts.sum())
    for i in range(counts.size):
        c = int(counts[i])
        rest -= c
        if left == 0:
            break
        if rest == 0:
            t = left
        elif c + rest < 10**9:
            t = int(rng.hypergeometric(c, rest, left))
        else:
            t = int(rng.binomial(left, c / (c + rest)))
        take[i] = t = min(c, left, max(t, left - rest))
        left -= t
    return take


def _split_copies(rng, fraction, w, copies):
    """:func:`held_out_split` over copies: row ``i`` is ``copies[i]`` units of weight 1
    (0: one unit of weight ``w[i]``, kept whole); ``ceil(fraction units)`` units are held
    out at random, at least one left to train on."""
    units = np.maximum(copies, 1)
    k = min(int(units.sum()) - 1, int(math.ceil(fraction * units.sum())))
    out = draw_copies(rng, units, k)
    held = np.where(copies > 0, out, out * w).astype(np.float64)
    rest = w - held
    tr, va = np.flatnonzero(rest > 0), np.flatnonzero(held > 0)
    return tr, va, rest[tr], held[va]
