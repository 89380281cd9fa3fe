"""The kernel registry: one table of every kernel's name, aliases, parameters and paths.

Each kernel is declared once, in :data:`KERNELS`: its name and aliases, its parameters (their
defaults, allowed values and which are bandwidths), the paths that serve it — random features
(a spectral sampler), Nyström features and the exact Gram matrix — and which bandwidths the
searching estimators (:class:`~bigkernel.ExactKernelRidgeCV`,
:class:`~bigkernel.RandomFeatureRidgeCV`) can vary. The job config, the estimators, the
random-feature maps, :func:`~bigkernel.kernels.factory.make_kernel`, the error messages and the
README's kernel table (:func:`kernel_table_markdown`) all read it.

This module is a leaf (it imports no kernel class), so the kernel classes themselves can read
their allowed values from it (``Matern`` its ``nu`` values).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field

from bigkernel._checks import did_you_mean
from bigkernel.errors import ParameterError

__all__ = [
    "BY_N_FEATURES",
    "DEFAULT_SAMPLER",
    "KERNELS",
    "PATHS",
    "PATH_ESTIMATORS",
    "PATH_NEEDS",
    "PRECOMPUTED",
    "KernelSpec",
    "Param",
    "bandwidth_names",
    "check_kernel_name",
    "gamma_from_length_scale",
    "is_precomputed",
    "document_kernels",
    "kernel_list_doc",
    "kernel_names",
    "kernel_serves",
    "kernel_spec",
    "kernel_table_markdown",
    "kernels_searching",
    "kernels_serving",
    "length_scale_from_gamma",
    "sampler_problem",
]

#: the paths a kernel can be served by
PATHS = ("random_features", "nystroem", "exact")
#: the estimators of each path (KernelRidge picks among them; YAML ``solver`` names the path)
PATH_ESTIMATORS = {
    "random_features": "RandomFeatureRidge, RandomFeatureRidgeCV",
    "nystroem": "NystroemRidge",
    "exact": "ExactKernelRidge, ExactKernelRidgeCV",
}
#: what a kernel needs to be served by each path
PATH_NEEDS = {
    "random_features": "random-feature sampler",
    "nystroem": "kernel function k(x, y)",
    "exact": "kernel function k(x, y)",
}
#: the default of a ``gamma`` that is scikit-learn's ``1 / n_features`` when no bandwidth is given
BY_N_FEATURES = "1/n_features"
#: the random-feature sampler every kernel accepts (ignored where nothing is drawn)
DEFAULT_SAMPLER = "iid"
#: ``kernel="precomputed"`` (scikit-learn's name): X *is* the Gram matrix; no kernel function,
#: so not a row of :data:`KERNELS`; only the exact path takes it (it reads K's entries)
PRECOMPUTED = "precomputed"
#: the paths that take a precomputed Gram matrix
PRECOMPUTED_PATHS = ("exact",)


@dataclass(frozen=True)
class Param:
    """One parameter of a kernel.

    Attributes
    ----------
    name : str
    default : float, str or None
        The value used when the parameter is not given; ``None``: not set (an alternative
        bandwidth); :data:`BY_N_FEATURES`: ``1 / n_features`` when no bandwidth is given.
    doc : str
        One line for the table.
    choices : tuple of float, optional
        The allowed values, when only a few are.
    bandwidth : bool
        ``gamma``, ``length_scale`` or ``precision``: setting one fixes the kernel's bandwidth.
    paths : tuple of str, optional
        The paths that take this parameter (default: every path of the kernel).
    """

    name: str
    default: float | str | None
    doc: str
    choices: tuple[float, ...] | None = None
    bandwidth: bool = False
    paths: tuple[str, ...] | None = None


@dataclass(frozen=True)
class KernelSpec:
    """One kernel: its names, parameters and the paths that serve it (a row of :data:`KERNELS`).

    Attributes
    ----------
    name : str
        The canonical name (``Kernel.name`` of its class, the saved name).
    formula : str
        ``k(x, y)``, for the table.
    paths : tuple of str
        Those of :data:`PATHS` that serve it.
    params : tuple of Param
    aliases : tuple of str
        Other names accepted for it (lower case; names are case-insensitive).
    search : dict
        ``{path: bandwidths}``: the bandwidths (``"gamma"``, ``"length_scale"``) the searching
        estimator of that path (ExactKernelRidgeCV, RandomFeatureRidgeCV) can vary.
    samplers : tuple of str
        Random-feature samplers (:data:`DEFAULT_SAMPLER` is accepted by every kernel).
    bandwidth_rule : {"gaussian", "inverse"} or None
        How ``gamma`` and ``length_scale`` are one bandwidth: ``"gaussian"`` γ = 1/(2ℓ²),
        ``"inverse"`` γ = 1/ℓ; None: no conversion.
    standalone : bool
        A model's kernel on its own, offered to jobs; False for building blocks of sums.
    feature_map : str
        The random-feature map when it is not a spectral sampler (for the table).
    """

    name: str
    formula: str
    paths: tuple[str, ...]
    params: tuple[Param, ...] = ()
    aliases: tuple[str, ...] = ()
    search: dict[str, tuple[str, ...]] = field(default_factory=dict)
    samplers: tuple[str, ...] = ()
    bandwidth_rule: str | None = None
    standalone: bool = True
    feature_map: str = ""

    def param(self, name: str) -> Param:
        """The parameter called ``name`` (ParameterError if the kernel has none)."""
        for p in self.params:
            if p.name == name:
                return p
        raise ParameterError(
            f"{self.name} kernel has no parameter {name!r}; its parameters: "
            f"{[p.name for p in self.params] or 'none'}{did_you_mean(name, [p.name for p in self.params])}"
        )

    def param_names(self, path: str | None = None) -> tuple[str, ...]:
        """Names of the parameters (those ``path`` takes, when given)."""
        return tuple(p.name for p in self.params if path is None or p.paths is None or path in p.paths)

    @property
    def bandwidths(self) -> tuple[str, ...]:
        """Names of the bandwidth parameters."""
        return tuple(p.name for p in self.params if p.bandwidth)

    @property
    def default_gamma(self) -> bool:
        """Whether a missing bandwidth means scikit-learn's ``gamma = 1 / n_features``."""
        return any(p.default == BY_N_FEATURES for p in self.params)

    def serves(self, path: str) -> bool:
        """Whether ``path`` serves this kernel."""
        _check_path(path)
        return path in self.paths

    def searchable(self, path: str) -> tuple[str, ...]:
        """The bandwidths the searching estimator of ``path`` can vary (may be empty)."""
        _check_path(path)
        return self.search.get(path, ())

    def check_choice(self, name: str, value: object) -> float:
        """Return ``value`` as a float if it is one of the allowed values of ``name``."""
        choices = self.param(name).choices
        if choices is None:  # pragma: no cover - callers ask only for parameters with choices
            raise ParameterError(f"{self.name} kernel: {name} has no fixed set of values")
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or value not in choices:
            raise ParameterError(
                f"{self.name} kernel: {name} must be one of {choices} (the closed forms), found {value!r}"
            )
        return float(value)  # type: ignore[arg-type]


def _gamma(doc: str = "bandwidth γ > 0") -> Param:
    return Param("gamma", BY_N_FEATURES, doc, bandwidth=True)


_EXACT_AND_NYSTROEM = ("nystroem", "exact")
_EVERY_PATH = PATHS

#: every kernel, in the order of messages and the table
KERNELS: tuple[KernelSpec, ...] = (
    KernelSpec(
        "rbf", "exp(−γ‖x−y‖²)", _EVERY_PATH, aliases=("gaussian",),
        params=(
            _gamma(),
            Param("length_scale", None, "ℓ or one per feature (ARD); γ = 1/(2ℓ²)", bandwidth=True),
            Param("precision", None, "PSD matrix A: exp(−½(x−y)ᵀA(x−y))", bandwidth=True,
                  paths=_EXACT_AND_NYSTROEM),
        ),
        search={"exact": ("gamma", "length_scale"), "random_features": ("gamma", "length_scale")},
        samplers=("iid", "orthogonal"), bandwidth_rule="gaussian",
    ),
    KernelSpec(
        "laplacian", "exp(−γ‖x−y‖₁)", _EVERY_PATH,
        params=(_gamma(), Param("length_scale", None, "ℓ; γ = 1/ℓ", bandwidth=True)),
        search={"exact": ("gamma", "length_scale"), "random_features": ("gamma", "length_scale")},
        samplers=("iid",), bandwidth_rule="inverse",
    ),
    KernelSpec(
        "matern", "Matérn of d = ‖x−y‖/ℓ (ν = ½: exp(−d))", _EVERY_PATH,
        params=(
            Param("length_scale", None, "ℓ or one per feature (ARD)", bandwidth=True),
            Param("nu", 1.5, "smoothness ν", choices=(0.5, 1.5, 2.5)),
            _gamma("ℓ = 1/√(2γ)"),
        ),
        search={"exact": ("gamma", "length_scale"), "random_features": ("gamma", "length_scale")},
        samplers=("iid",), bandwidth_rule="gaussian",
    ),
    KernelSpec("fourier", "fixed 1-D basis cos/sin 2πjx", ("random_features",)),
    KernelSpec(
        "polynomial", "(γ xᵀy + coef0)^degree", _EVERY_PATH, aliases=("poly",),
        params=(
            Param("degree", 3, "a positive integer"),
            _gamma(),
            Param("coef0", 1.0, "coef0 < 0 is not PSD"),
        ),
        search={"exact": ("gamma",), "random_features": ("gamma",)},
        feature_map="explicit monomials, else TensorSketch",
    ),
    KernelSpec("linear", "xᵀy", _EXACT_AND_NYSTROEM),
    KernelSpec(
        "sigmoid", "tanh(γ xᵀy + coef0), not PSD", _EXACT_AND_NYSTROEM,
        params=(_gamma(), Param("coef0", 1.0, "offset")),
        search={"exact": ("gamma",)},
    ),
    KernelSpec("cosine", "xᵀy / (‖x‖‖y‖) (0 for a zero row)", _EXACT_AND_NYSTROEM),
    KernelSpec(
        "chi2", "exp(−γ Σᵢ (xᵢ−yᵢ)²/(xᵢ+yᵢ)), x, y ≥ 0", _EXACT_AND_NYSTROEM,
        params=(Param("gamma", 1.0, "γ > 0; scikit-learn's default 1, not 1/n_features", bandwidth=True),),
        search={"exact": ("gamma",)},
    ),
    KernelSpec("additive_chi2", "−Σᵢ (xᵢ−yᵢ)²/(xᵢ+yᵢ), x, y ≥ 0; not PSD (Nyström: its PSD part)", _EXACT_AND_NYSTROEM),
    KernelSpec(
        "periodic", "exp(−2 sin²(π‖x−y‖/p) / ℓ²)", _EXACT_AND_NYSTROEM, aliases=("exp_sine_squared",),
        params=(
            Param("length_scale", 1.0, "ℓ", bandwidth=True),
            Param("periodicity", 1.0, "period p"),
        ),
    ),
    KernelSpec(
        "constant", "c (for sums: k + c)", _EXACT_AND_NYSTROEM,
        params=(Param("value", 1.0, "c > 0"),), standalone=False,
    ),
)  # fmt: skip

_BY_NAME = {spec.name: spec for spec in KERNELS}
_ALIASES = {alias: spec.name for spec in KERNELS for alias in spec.aliases}


def _check_path(path: str) -> None:
    if path not in PATHS:
        raise ParameterError(f"unknown kernel path {path!r}; paths: {', '.join(PATHS)}{did_you_mean(path, PATHS)}")


def kernel_names(*, standalone_only: bool = False) -> tuple[str, ...]:
    """Every canonical kernel name (only those usable on their own, when asked)."""
    return tuple(s.name for s in KERNELS if s.standalone or not standalone_only)


def kernels_serving(path: str, *, standalone_only: bool = False) -> tuple[str, ...]:
    """Names of the kernels ``path`` serves, in table order."""
    _check_path(path)
    return tuple(s.name for s in KERNELS if path in s.paths and (s.standalone or not standalone_only))


def kernels_searching(path: str, param: str) -> tuple[str, ...]:
    """Names of the kernels whose ``param`` (a bandwidth) the searching estimator of ``path`` varies."""
    _check_path(path)
    return tuple(s.name for s in KERNELS if param in s.search.get(path, ()))


def kernel_list_doc(path: str, *, searched: str | None = None) -> str:
    """The kernel names ``path`` serves (or, with ``searched``, those whose bandwidth
    ``searched`` its searching estimator varies) as docstring text: ````"rbf"``, ``"laplacian"``…``."""
    names = kernels_searching(path, searched) if searched else kernels_serving(path)
    return ", ".join(f'``"{n}"``' for n in names)


#: the markers :func:`document_kernels` fills in a docstring
KERNEL_DOC_MARKERS = ("{kernels}", "{searched_kernels}")


def document_kernels(path: str, *, searched: str | None = None):
    """Class decorator: fill ``{kernels}`` (the names ``path`` serves) and ``{searched_kernels}``
    (those whose ``searched`` bandwidth is varied) in the class docstring from the registry, so
    an estimator's documented kernels are the ones it accepts (tests/test_kernel_docs.py)."""

    def fill(cls: type) -> type:
        doc = cls.__doc__ or ""
        doc = doc.replace("{kernels}", kernel_list_doc(path))
        if searched:
            doc = doc.replace("{searched_kernels}", kernel_list_doc(path, searched=searched))
        cls.__doc__ = doc
        return cls

    return fill


def bandwidth_names() -> tuple[str, ...]:
    """Every parameter name that is a bandwidth for some kernel (gamma, length_scale, precision)."""
    names: dict[str, None] = {}
    for spec in KERNELS:
        names.update(dict.fromkeys(spec.bandwidths))
    return tuple(names)


def is_precomputed(kernel: object) -> bool:
    """Whether ``kernel`` is scikit-learn's ``"precomputed"`` (case-insensitive)."""
    return isinstance(kernel, str) and kernel.lower() == PRECOMPUTED


def _precomputed_problem(path: str) -> str:
    """Why ``kernel="precomputed"`` cannot go where a kernel function is needed."""
    if path in PRECOMPUTED_PATHS:
        return (
            f"kernel={PRECOMPUTED!r} means X is the Gram matrix K: it has no kernel function k(x, y) to "
            f"build; pass K to {PATH_ESTIMATORS[path]} or KernelRidge as X"
        )
    return (
        f"kernel={PRECOMPUTED!r} (X is the Gram matrix K) has no kernel function k(x, y), so the {path} path "
        f"({PATH_ESTIMATORS[path]}) cannot serve it: use {_paths_words(PRECOMPUTED_PATHS)} or KernelRidge"
    )


def _lookup(name: object) -> KernelSpec | None:
    if not isinstance(name, str):
        return None
    key = name.lower()
    return _BY_NAME.get(_ALIASES.get(key, key))


def kernel_spec(name: str) -> KernelSpec:
    """The row of kernel ``name`` (case-insensitive; aliases resolve to their kernel).

    Raises
    ------
    ParameterError
        Unknown name, with the known names and the closest match.
    """
    spec = _lookup(name)
    if spec is None:
        if not isinstance(name, str):
            raise ParameterError(f"kernel must be a name, found {type(name).__name__}")
        if is_precomputed(name):
            raise ParameterError(_precomputed_problem("exact"))
        raise ParameterError(
            f"unknown kernel {name!r}; valid kernels are {', '.join(kernel_names())}"
            + did_you_mean(name.lower(), list(_BY_NAME) + list(_ALIASES))
        )
    return spec


def kernel_serves(kernel: object, path: str) -> bool:
    """Whether ``kernel`` (a name; anything else is False) is a known kernel ``path`` serves."""
    spec = _lookup(kernel)
    return spec is not None and spec.serves(path)


def _paths_words(paths: tuple[str, ...]) -> str:
    return " or ".join(f"the {p} path ({PATH_ESTIMATORS[p]})" for p in paths)


def check_kernel_name(name: object, path: str) -> KernelSpec:
    """The row of kernel ``name``, checked to be served by ``path``.

    Parameters
    ----------
    name : str
        A kernel name or alias (case-insensitive).
    path : {"random_features", "nystroem", "exact"}

    Returns
    -------
    KernelSpec

    Raises
    ------
    ParameterError
        ``name`` is not a string, is unknown (with a did-you-mean among the kernels of
        ``path``), or names a kernel ``path`` cannot serve; the message names the paths that can.
    """
    _check_path(path)
    serving = kernels_serving(path)
    if not isinstance(name, str):
        raise ParameterError(
            f"the {path} path ({PATH_ESTIMATORS[path]}) takes a kernel name, one of {', '.join(serving)}; "
            f"found a {type(name).__name__} object"
            + ("; Kernel objects are served by the nystroem and exact paths" if path == "random_features" else "")
        )
    spec = _lookup(name)
    if spec is None and is_precomputed(name):
        raise ParameterError(_precomputed_problem(path))
    if spec is None:
        raise ParameterError(
            f"unknown kernel {name!r}; valid kernels are {', '.join(serving)}"
            + did_you_mean(name.lower(), list(_BY_NAME) + list(_ALIASES))
        )
    if path not in spec.paths:
        raise ParameterError(
            f"kernel {spec.name!r} has no {PATH_NEEDS[path]}, so the {path} path ({PATH_ESTIMATORS[path]}) "
            f"cannot serve it: use {_paths_words(spec.paths)}, or a kernel the {path} path serves: "
            f"{', '.join(serving)}"
        )
    return spec


def sampler_problem(kernel: str, sampler: str) -> str | None:
    """Why random-feature ``sampler`` does not exist for ``kernel``, or None if it does."""
    spec = kernel_spec(kernel)
    if sampler == DEFAULT_SAMPLER or sampler in spec.samplers:
        return None
    having = [s.name for s in KERNELS if sampler in s.samplers]
    return (
        f"sampler {sampler!r} exists for kernel {', '.join(repr(k) for k in having)} only, found kernel "
        f"{spec.name!r}; use sampler {DEFAULT_SAMPLER!r}"
    )


# --------------------------------------------------------------------------------------------
# one bandwidth, two spellings


def _rule(kernel: str) -> str:
    spec = kernel_spec(kernel)
    if spec.bandwidth_rule is None:
        raise ParameterError(
            f"kernel {spec.name!r} has no gamma <-> length_scale conversion; kernels with one: "
            f"{', '.join(s.name for s in KERNELS if s.bandwidth_rule)}"
        )
    return spec.bandwidth_rule


def length_scale_from_gamma(kernel: str, gamma: float) -> float:
    """Convert the ``gamma`` of a kernel to its length scale ``ℓ``.

    rbf and matern: γ = 1/(2ℓ²) (matern: the rbf limit ν → ∞); laplacian: γ = 1/ℓ.
    """
    if _rule(kernel) == "inverse":
        return 1.0 / gamma
    return 1.0 / math.sqrt(2.0 * gamma)


def gamma_from_length_scale(kernel: str, length_scale: float) -> float:
    """Inverse of :func:`length_scale_from_gamma`."""
    if _rule(kernel) == "inverse":
        return 1.0 / length_scale
    return 1.0 / (2.0 * length_scale**2)


# --------------------------------------------------------------------------------------------
# documentation


def _param_cell(p: Param) -> str:
    text = f"`{p.name}`"
    if p.choices is not None:
        text += " ∈ {" + ", ".join(f"{c:g}" for c in p.choices) + "}"
    if p.default is not None:
        text += f" = {p.default}" if isinstance(p.default, str) else f" = {p.default:g}"
    notes = [p.doc] + ([f"{', '.join(p.paths)} only"] if p.paths is not None else [])
    return f"{text} ({'; '.join(notes)})"


def kernel_table_markdown() -> str:
    """The kernel table of the README, generated from :data:`KERNELS` (tests keep them equal)."""
    mark = {True: "✓", False: "—"}
    lines = [
        "| kernel | k(x, y) | parameters (default) | random features | Nyström | exact | "
        "searched by ExactKernelRidgeCV | searched by RandomFeatureRidgeCV |",
        "|---|---|---|:-:|:-:|:-:|---|---|",
    ]
    for s in KERNELS:
        name = f"`{s.name}`" + "".join(f", `{a}`" for a in s.aliases)
        if not s.standalone:
            name += " (in sums)"
        params = ", ".join(_param_cell(p) for p in s.params) or "—"
        rff = mark[s.serves("random_features")]
        if "orthogonal" in s.samplers:
            rff += " (iid, orthogonal)"
        if s.feature_map:
            rff += f" ({s.feature_map})"
        search = [", ".join(f"`{b}`" for b in s.searchable(p)) or "—" for p in ("exact", "random_features")]
        lines.append(
            f"| {name} | {s.formula} | {params} | {rff} | {mark[s.serves('nystroem')]} | "
            f"{mark[s.serves('exact')]} | {search[0]} | {search[1]} |"
        )
    lines.append(
        f"| `{PRECOMPUTED}` | K given as X: fit takes K(X, X) (n × n), predict K(X*, X_fit) (m × n) | — | "
        + " | ".join(mark[p in PRECOMPUTED_PATHS] for p in PATHS)
        + " | — | — |"
    )
    return "\n".join(lines) + "\n"
