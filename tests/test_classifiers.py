"""Classifiers: scikit-learn contract, labels, one-vs-rest, class weights, save/load, dask/zarr."""

import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from bigkernel import (
    ExactKernelClassifier,
    KernelClassifier,
    NystroemClassifier,
    RandomFeatureClassifier,
)

pytestmark = pytest.mark.numerics


def _expected_failures(est):
    return {}


@parametrize_with_checks(
    [
        RandomFeatureClassifier(n_components=64),
        NystroemClassifier(n_components=32),
        ExactKernelClassifier(),
        KernelClassifier(n_components=32),
    ],
    expected_failed_checks=_expected_failures,
)
def test_sklearn_compatible(estimator, check):
    check(estimator)
