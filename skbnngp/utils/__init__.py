"""Utilities: estimator discovery and the skops trusted types."""

from ._skops import skops_trusted_types
from .discovery import all_estimators

__all__ = ["all_estimators", "skops_trusted_types"]
