"""Every public function and public method of the names in ``bigkernel.__all__`` is annotated:
each parameter (but ``self``/``cls`` and ``*args``/``**kwargs``) and the return (but ``__init__``'s),
so the rule holds for code added later."""

from __future__ import annotations

import inspect
import typing

import pytest

import bigkernel

_VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


def _own(obj) -> bool:
    """Whether ``obj`` was written in bigkernel (not inherited from scikit-learn or builtins)."""
    return (getattr(obj, "__module__", None) or "").split(".")[0] == "bigkernel"


def _public_callables():
    """(label, function) for each public function of ``__all__`` and each public method (and
    ``__init__``) that a public class defined in bigkernel has from bigkernel code."""
    for name in bigkernel.__all__:
        obj = getattr(bigkernel, name)
        if inspect.isfunction(obj) and _own(obj):
            yield name, obj
        elif inspect.isclass(obj) and _own(obj):
            for cls in obj.__mro__:
                for attr, value in vars(cls).items():
                    if attr.startswith("_") and attr != "__init__":
                        continue
                    if isinstance(value, (staticmethod, classmethod)):
                        value = value.__func__
                    if inspect.isfunction(value) and _own(value):
                        yield f"{name}.{attr}", value


def _missing(label: str, func) -> list[str]:
    sig = inspect.signature(func)
    missing = [
        f"{label}({p.name})"
        for i, p in enumerate(sig.parameters.values())
        if p.kind not in _VARIADIC
        and not (i == 0 and p.name in ("self", "cls"))
        and p.annotation is inspect.Parameter.empty
    ]
    if func.__name__ != "__init__" and sig.return_annotation is inspect.Signature.empty:
        missing.append(f"{label} -> return")
    return missing


def test_the_walk_sees_the_estimators_and_functions():
    labels = {label for label, _ in _public_callables()}
    for expected in (
        "load",
        "make_data",
        "bootstrap",
        "RandomFeatureRidge.fit",
        "RandomFeatureRidge.__init__",
        "KernelRidge.predict",
        "ExactKernelRidgeCV.fit_dataset",
        "NystroemRidge.predict_to_zarr",
    ):
        assert expected in labels
    # inherited scikit-learn methods are scikit-learn's to annotate
    assert "RandomFeatureRidge.get_params" not in labels


def test_public_api_is_annotated():
    missing = [m for label, func in _public_callables() for m in _missing(label, func)]
    assert not missing, "not annotated: " + ", ".join(sorted(set(missing)))


def test_annotations_resolve():
    # string annotations (``from __future__ import annotations``) name importable types
    for label, func in _public_callables():
        try:
            typing.get_type_hints(func)
        except Exception as exc:  # report which annotation does not resolve
            pytest.fail(f"{label}: annotations do not resolve: {type(exc).__name__}: {exc}")


def test_missing_annotation_is_reported():
    def f(a, b: int, *args, **kwargs):
        return a

    assert _missing("f", f) == ["f(a)", "f -> return"]
