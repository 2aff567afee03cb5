"""Command-line interface: ``skbnngp compare``.

``skbnngp compare`` cross-validates every estimator of the package (found by
:func:`skbnngp.utils.all_estimators`, so new estimators join automatically) against
scikit-learn's Gaussian process on an embedded data set or the user's CSV file, and reports
accuracy, calibrated uncertainty and time as a table (stdout, ``report.md``, ``report.json``)
and a figure (``calibration.png``)::

    skbnngp compare                                   # concrete, 5 folds, every regressor
    skbnngp compare diabetes -e stp gpr --folds 3
    skbnngp compare --csv data.csv --target price --dropna --one-hot
    skbnngp compare iris                              # classification: accuracy, NLL, ECE
    skbnngp compare --list                            # estimator and data set names

Every estimator is fitted as ``Pipeline([StandardScaler(), estimator])`` on the training
folds. Regressors are scored through their predictive distribution (``predict_dist``; for
estimators without one, ``predict(X, return_std=True)`` read as a Gaussian), classifiers
through ``predict_proba``. Bad input (a missing file or column, non-numeric or missing
values, an unknown name) ends with one line ``skbnngp compare: error: ...`` and exit
status 2.
"""


from __future__ import annotations

import argparse
import sys

from .compare._common import DEFAULT_DATASET, DEFAULT_FOLDS, PROG, UsageError


class _Parser(argparse.ArgumentParser):
    """ArgumentParser whose errors are one line (no usage block) and never exit by itself."""

    def error(self, message):
        raise UsageError(f"{message} (see {self.prog} --help)", prog=self.prog)




def _compare_parser(subparsers):
    p = subparsers.add_parser(
        "compare", help="cross-validate the estimators against scikit-learn's GP",
        description="Cross-validate skbnngp's estimators and scikit-learn's Gaussian process "
        "on a data set; print a table of accuracy, uncertainty and time, and write "
        "report.md, report.json and calibration.png. Put the data set name before "
        "options that take several values (-e, --drop).")
    p.add_argument("dataset", nargs="?", default=None,
                   help=f"embedded data set (default: {DEFAULT_DATASET}; see --list)")
    p.add_argument("--csv", metavar="FILE", help="your own CSV file with a header row "
                   "(.csv or .csv.gz)")
    p.add_argument("--target", metavar="COLUMN", help="target column of --csv")
    p.add_argument("--drop", metavar="COLUMN", nargs="+", default=[],
                   help="columns of --csv to ignore (e.g. IDs)")
    p.add_argument("--one-hot", action="store_true",
                   help="one-hot encode non-numeric feature columns instead of rejecting them")
    p.add_argument("--dropna", action="store_true",
                   help="drop rows with missing values instead of rejecting them")
    p.add_argument("--sep", default=None, help="CSV delimiter (default: detected)")
    p.add_argument("--task", choices=("regression", "classification"), default=None,
                   help="default: the data set's; for --csv, classification when the "
                   "target is not numeric")
    p.add_argument("-e", "--estimators", nargs="+", metavar="NAME", default=None,
                   help="class names or short aliases (e.g. stp gpr), case-insensitive; "
                   "default: every estimator of the task plus scikit-learn's GP")
    p.add_argument("--folds", type=_int_at_least(2), default=DEFAULT_FOLDS,
                   help=f"K of K-fold cross-validation (default: {DEFAULT_FOLDS})")
    p.add_argument("--max-samples", type=_int_at_least(4), default=None, metavar="N",
                   help="use a random subset of N rows")
    p.add_argument("--time-budget", type=_non_negative_float, default=300.0, metavar="SECONDS",
                   help="wall-clock budget of the cross-validation (default: 300). Each model's "
                   "fit time is first predicted from timed fits on 50 rows doubling up to a "
                   "quarter of a fold (CPU time, the fixed start-up cost apart; their time is "
                   "deducted); the package's models keep every row when their folds fit, "
                   "cheapest first, and a model that does not fit (or scikit-learn's GP, which "
                   "gets what is left) is trained on a random subset of the rows, which the "
                   "report says. 0: no budget")
    p.add_argument("--max-iter", type=_int_at_least(1), default=None, metavar="N",
                   help="max_iter of every estimator that has one (default: its own)")
    p.add_argument("--device", default="auto",
                   help="device of the skbnngp estimators: auto (default), cpu, cuda, cuda:N")
    p.add_argument("--random-state", type=int, default=0, metavar="SEED",
                   help="seed of the folds and of every estimator with random_state (default: 0)")
    p.add_argument("--n-jobs", type=int, default=-1, metavar="N",
                   help="fits run at a time (joblib over folds x estimators); -1, the default, "
                   "uses every core; 1 gives the cleanest timings")
    p.add_argument("--threads", type=_int_at_least(1), default=1, metavar="N",
                   help="BLAS/OpenMP threads inside each fit (default: 1: on a few cores, parallel "
                   "fits beat threaded linear algebra)")
    p.add_argument("-o", "--output-dir", metavar="DIR", default=None,
                   help="where report.md, report.json and calibration.png go (default: "
                   "skbnngp-compare-<dataset>)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.add_argument("--list", action="store_true",
                   help="list the estimator and data set names, then exit")
    p.set_defaults(func=_compare)
    return p


def _non_negative_float(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value


def _int_at_least(low):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value

    parse.__name__ = "integer"
    return parse




def _compare(args, argv, out, err):
    """Run ``skbnngp compare`` (imported here: ``--help`` never loads torch or sklearn)."""
    from .compare._run import _compare as run

    return run(args, argv, out, err)


def build_parser():
    """The ``skbnngp`` argument parser (sub-command ``compare``).

    Returns
    -------
    parser : argparse.ArgumentParser
    """
    from . import __version__

    parser = _Parser(prog=PROG, description="scikit-learn compatible Bayesian neural-network "
                     "/ Gaussian-process estimators.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    _compare_parser(subparsers)
    return parser


def main(argv=None, *, stdout=None, stderr=None):
    """Entry point of the ``skbnngp`` console script and of ``python -m skbnngp``.

    Parameters
    ----------
    argv : list of str, default=None
        Arguments after the program name; None reads ``sys.argv[1:]``.
    stdout, stderr : file-like, default=None
        Streams for the table and for progress and errors (``sys.stdout``/``sys.stderr``).

    Returns
    -------
    status : int
        0 on success, 1 when some fits failed, 2 on bad input (after one line on stderr).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    out, err = stdout or sys.stdout, stderr or sys.stderr
    try:
        args, extra = build_parser().parse_known_args(argv)
        if extra:
            prog = PROG if args.command is None else f"{PROG} {args.command}"
            raise UsageError(f"unrecognized arguments: {' '.join(extra)} (see {prog} --help)",
                             prog=prog)
        if args.command is None:
            raise UsageError(f"a command is required: compare (see {PROG} --help)", prog=PROG)
        return args.func(args, argv[1:], out, err)
    except UsageError as exc:
        err.write(f"{exc.prog}: error: {exc}\n")
        return 2
    except KeyboardInterrupt:
        err.write(f"{PROG}: interrupted\n")
        return 130
