"""Build an exact kernel from its name and parameters, as the registry declares them.

:func:`make_kernel` reads the kernel's row of :mod:`bigkernel.kernels.registry` (name,
aliases, parameters, bandwidths, defaults) and constructs its class; the class checks the
values.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from bigkernel._checks import did_you_mean
from bigkernel.errors import ParameterError
from bigkernel.kernels._blocks import _positive, _positive_int
from bigkernel.kernels.base import Kernel, Product, Scaled, Sum
from bigkernel.kernels.chi2 import AdditiveChi2, Chi2
from bigkernel.kernels.dot_product import Cosine, Linear, Polynomial, Sigmoid
from bigkernel.kernels.registry import (
    check_kernel_name,
    gamma_from_length_scale,
    kernels_serving,
    length_scale_from_gamma,
)
from bigkernel.kernels.stationary import RBF, Constant, Laplacian, Matern, Periodic

__all__ = ["KERNEL_NAMES", "kernel_class", "make_kernel"]

#: names accepted by :func:`make_kernel`: the kernels of the registry the exact path serves
#: (aliases such as ``poly``, ``gaussian``, ``exp_sine_squared`` resolve to them)
KERNEL_NAMES: tuple[str, ...] = kernels_serving("exact")
# the classes by their saved name; tests check they are exactly the registry's exact kernels
_CLASSES: dict[str, type[Kernel]] = {
    cls.name: cls
    for cls in (RBF, Laplacian, Matern, Polynomial, Linear, Sigmoid, Cosine, Chi2, AdditiveChi2, Periodic, Constant)
}


def kernel_from_dict(spec: dict[str, Any]) -> Kernel:
    """Rebuild a kernel from its :meth:`Kernel.to_dict` description (saved models)."""
    if not isinstance(spec, dict) or "name" not in spec:
        raise ParameterError(f"a kernel description is a dict with a 'name' key, found {spec!r}")
    params = {k: v for k, v in spec.items() if k != "name"}
    name = spec["name"]
    if name in ("sum", "product"):
        cls = Sum if name == "sum" else Product
        return cls(tuple(kernel_from_dict(k) for k in params["kernels"]))
    if name == "scaled":
        return Scaled(params["scale"], kernel_from_dict(params["kernel"]))
    return make_kernel(name, **params)


def kernel_class(name: str) -> type[Kernel]:
    """The class of the exact kernel ``name`` (any alias; ParameterError if none)."""
    return _CLASSES[check_kernel_name(name, "exact").name]


def make_kernel(
    name: str | Kernel,
    *,
    n_features: int | None = None,
    strict: bool = True,
    **params: Any,
) -> Kernel:
    """Build a kernel from a scikit-learn style name and parameters.

    Parameters
    ----------
    name : str or Kernel
        One of :data:`KERNEL_NAMES` or an alias (case-insensitive; ``"poly"`` is
        ``"polynomial"``); see the kernel table of the README. A :class:`Kernel` is returned
        unchanged (``params`` must then be empty or None when ``strict``).
    n_features : int, optional
        Resolves scikit-learn's default ``gamma = 1 / n_features`` for the kernels whose
        registry row says so (rbf, laplacian, matern, polynomial, sigmoid) when no bandwidth
        (``gamma``, ``length_scale``, ``precision``) is given; without it a missing bandwidth is
        a ParameterError.
    strict : bool, default=True
        If False, parameters this kernel does not use are ignored, as scikit-learn's
        ``KernelRidge`` does with ``gamma``, ``degree`` and ``coef0``.
    **params
        The kernel's parameters; ``None`` values count as not given. laplacian and matern
        accept ``gamma`` or ``length_scale`` (laplacian ``γ = 1/ℓ``, matern ``ℓ = 1/√(2γ)``),
        the conventions of :func:`~bigkernel.kernels.registry.length_scale_from_gamma`.

    Returns
    -------
    Kernel

    Raises
    ------
    ParameterError
        Unknown name (with the closest match) or a kernel the exact path does not serve (with
        the paths that do), an unknown parameter, or a bad value.
    """
    given = {k: v for k, v in params.items() if v is not None}
    if isinstance(name, Kernel):
        if given and strict:
            raise ParameterError(f"parameters {sorted(given)} cannot be applied to a Kernel instance")
        return name
    if not isinstance(name, str):
        raise ParameterError(f"kernel must be a name or a Kernel, found {type(name).__name__}")
    spec = check_kernel_name(name, "exact")
    allowed = spec.param_names("exact")
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        if strict:
            hint = "".join(did_you_mean(u, allowed) for u in unknown)
            raise ParameterError(
                f"{spec.name} kernel: unknown parameter(s) {unknown}; valid: {list(allowed) or 'none'}{hint}"
            )
        given = {k: v for k, v in given.items() if k in allowed}
    if spec.default_gamma and not set(given) & set(spec.bandwidths):
        given["gamma"] = _default_gamma(spec.name, "length_scale" in spec.bandwidths, n_features)
    cls = _CLASSES[spec.name]
    return cls(**_bandwidth_as_stored(spec.name, cls, given))


def _bandwidth_as_stored(kernel: str, cls: type[Kernel], params: dict[str, Any]) -> dict[str, Any]:
    """Accept ``gamma`` or ``length_scale`` when the class stores only the other one
    (laplacian stores γ, matern ℓ), converting with the registry's rule, as the random-feature
    maps do."""
    stored = {f.name for f in fields(cls) if f.init}
    if {"gamma", "length_scale"} <= stored or not {"gamma", "length_scale"} & stored:
        return params
    params = dict(params)
    if "gamma" in params and "length_scale" in params:
        raise ParameterError(f"{kernel} kernel: give gamma or length_scale, not both")
    if "length_scale" in params and "length_scale" not in stored:
        params["gamma"] = gamma_from_length_scale(kernel, _positive(kernel, "length_scale", params.pop("length_scale")))
    elif "gamma" in params and "gamma" not in stored:
        params["length_scale"] = length_scale_from_gamma(kernel, _positive(kernel, "gamma", params.pop("gamma")))
    return params


def _default_gamma(kernel: str, has_length_scale: bool, n_features: int | None) -> float:
    if n_features is None:
        extra = " or length_scale" if has_length_scale else ""
        raise ParameterError(
            f"{kernel} kernel: give gamma{extra}, or n_features for scikit-learn's default gamma = 1 / n_features"
        )
    return 1.0 / _positive_int(kernel, "n_features", n_features)
