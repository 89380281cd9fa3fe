"""Estimators document the kernels they accept from the registry (issue 20, item 6): each
``kernel :`` entry is filled by :func:`~bigkernel.kernels.registry.document_kernels`, so a
kernel added to the registry appears in every docstring of the paths that serve it."""

from __future__ import annotations

import inspect
import re

import pytest

import bigkernel
from bigkernel.kernels.registry import (
    KERNEL_DOC_MARKERS,
    document_kernels,
    kernel_spec,
    kernels_searching,
    kernels_serving,
)

#: which registry path each public estimator with a ``kernel`` parameter serves; the CV searches
#: of the random-feature path take the kernels with a bandwidth to search only
SEARCHES = {"RandomFeatureRidgeCV", "RandomFeatureClassifierCV"}
PATH_OF = {
    "RandomFeatureRidge": "random_features",
    "RandomFeatureRidgeCV": "random_features",
    "RandomFeatureClassifier": "random_features",
    "RandomFeatureClassifierCV": "random_features",
    "RandomFeatures": "random_features",
    "NystroemRidge": "nystroem",
    "NystroemClassifier": "nystroem",
    "NystroemFeatures": "nystroem",
    "ExactKernelRidge": "exact",
    "ExactKernelRidgeCV": "exact",
    "ExactKernelClassifier": "exact",
    "KernelRidge": "exact",
    "KernelClassifier": "exact",
}


def _estimators() -> list[type]:
    out = []
    for name in bigkernel.__all__:
        obj = getattr(bigkernel, name)
        if inspect.isclass(obj) and "kernel" in inspect.signature(obj.__init__).parameters:
            out.append(obj)
    return out


def _kernel_entry(cls: type) -> str:
    """The Parameters entry naming ``kernel`` (alone, or in a group ``kernel, gamma, …``)."""
    doc = inspect.cleandoc(cls.__doc__ or "")
    section = doc.split("Parameters\n----------\n", 1)[1]
    section = re.split(r"\n\n\S[^\n]*\n-{3,}\n", section)[0]
    entries = re.split(r"\n(?=\S)", re.sub(r",\n(?=\S)", ", ", section))  # a group's names may wrap
    found = [e for e in entries if "kernel" in re.split(r"[\s,]+", e.split(" : ")[0].split("\n    ")[0])]
    assert found, f"{cls.__name__} documents no kernel parameter"
    return found[0]


def test_every_estimator_with_a_kernel_is_mapped():
    assert sorted(c.__name__ for c in _estimators()) == sorted(PATH_OF)


@pytest.mark.parametrize("cls", _estimators(), ids=lambda c: c.__name__)
def test_the_documented_kernels_are_the_registry_s(cls):
    entry = _kernel_entry(cls)
    assert not any(m in (cls.__doc__ or "") for m in KERNEL_DOC_MARKERS), "an unfilled marker"
    named = re.findall(r'``"(\w+)"``', entry)
    path = PATH_OF[cls.__name__]
    if not named:  # a group entry pointing at the estimator whose entry lists them
        pointed = re.search(r":class:`~?bigkernel\.(\w+)`", entry)
        assert pointed and pointed.group(1) in PATH_OF and PATH_OF[pointed.group(1)] == path, entry
        return
    named = [kernel_spec(n).name for n in named]  # an alias ("poly") counts as its kernel; unknown: error
    if cls.__name__ in SEARCHES:
        assert set(named) == set(kernels_searching(path, "gamma"))
        return
    served = kernels_serving(path)
    assert set(served) <= set(named), f"{cls.__name__} omits {sorted(set(served) - set(named))}"
    assert set(named) - set(served) <= set(kernels_searching(path, "gamma"))  # a search's subset repeats names


def test_document_kernels_fills_from_the_registry():
    @document_kernels("random_features", searched="gamma")
    class Doc:
        """kernel : str
        One of {kernels}; γ searched for {searched_kernels}."""

    for name in kernels_serving("random_features"):
        assert f'``"{name}"``' in Doc.__doc__
    assert "{kernels}" not in Doc.__doc__ and "{searched_kernels}" not in Doc.__doc__
