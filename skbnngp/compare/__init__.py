"""``skbnngp compare``: cross-validate the package's estimators against scikit-learn's GP.

The flow, one module a step: :mod:`._data` loads the data set (embedded or CSV),
:mod:`._registry` lists the models of the task (discovered, so new estimators join without
editing the runner), :mod:`._run` cross-validates them in parallel and scores their
predictives, and :mod:`._report` writes the table, ``report.md``, ``report.json`` and the
calibration figure. :mod:`skbnngp.cli` only parses the command line.
"""
