"""Kernels: the registry (one table of names, parameters and paths) and their exact evaluations.

- :mod:`~bigkernel.kernels.registry`: every kernel declared once (read by the config, the
  estimators, the feature maps, error messages and the README's kernel table);
- :mod:`~bigkernel.kernels.factory`: :func:`make_kernel`, a kernel from its name;
- :mod:`~bigkernel.kernels.base`: the :class:`Kernel` base class, sums, products, scalings;
- :mod:`~bigkernel.kernels.stationary` (rbf, laplacian, matern, periodic, constant),
  :mod:`~bigkernel.kernels.dot_product` (linear, polynomial, sigmoid, cosine) and
  :mod:`~bigkernel.kernels.chi2` (chi2, additive_chi2): the exact kernels;
- :mod:`~bigkernel.kernels.psd`: :func:`check_psd`.
"""

from bigkernel.kernels.base import Kernel, Product, Scaled, Sum
from bigkernel.kernels.chi2 import AdditiveChi2, Chi2
from bigkernel.kernels.dot_product import Cosine, Linear, Polynomial, Sigmoid
from bigkernel.kernels.factory import KERNEL_NAMES, kernel_from_dict, make_kernel
from bigkernel.kernels.psd import PSDCheck, check_psd
from bigkernel.kernels.registry import (
    check_kernel_name,
    kernel_spec,
    kernel_table_markdown,
    kernels_serving,
)
from bigkernel.kernels.stationary import RBF, Constant, Laplacian, Matern, Periodic

__all__ = [
    "Kernel",
    "RBF",
    "Laplacian",
    "Matern",
    "Polynomial",
    "Linear",
    "Sigmoid",
    "Cosine",
    "Chi2",
    "AdditiveChi2",
    "Periodic",
    "Constant",
    "Sum",
    "Product",
    "Scaled",
    "KERNEL_NAMES",
    "make_kernel",
    "kernel_from_dict",
    "PSDCheck",
    "check_psd",
    "check_kernel_name",
    "kernel_spec",
    "kernel_table_markdown",
    "kernels_serving",
]
