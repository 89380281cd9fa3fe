"""Job configuration: a YAML file read into frozen, validated dataclasses.

Layer 4 (shell). Pure: no Dask, no data access — whether input files exist is checked later by
the job runner. The public entry points are :func:`load_config` (a YAML file) and
:func:`config_from_dict` (an already-parsed mapping, e.g. ``JobConfig.to_dict()``).

Rules
-----
Reading
    The file is parsed with a :class:`yaml.SafeLoader` subclass only. Duplicate keys in any
    mapping, tags that build Python objects (``!!python/object``, ``!!python/object/apply``, any
    local ``!tag``), YAML syntax errors and an empty file are :class:`~bigkernel.errors.ConfigError`
    naming ``file:line``. A missing file is :class:`~bigkernel.errors.DataNotFoundError`.
Validation
    Unknown keys at any level are errors that name the full dotted key (``model.n_compnents``),
    suggest close matches and list the valid keys. Wrong types name the key, the expected type and
    the value found. Booleans are not numbers. A number YAML 1.1 reads as text (``1e-3``,
    ``1E5``, ``1.0e3`` — the YAML 1.1 float needs a decimal point and a signed exponent) is an
    error telling the user what to write (``1.0e-3``); it is never converted silently.
All problems at once
    Every field is checked and all problems are reported together in one ``ConfigError``, one line
    each, as ``<file>:<line>: <dotted.key>: <message>``. Checks that relate several fields (for
    example an output folder that would overwrite an input) run once the fields themselves are
    valid, so one mistake does not cascade into several messages.
Paths
    Relative paths are resolved against the directory of the config file (against the current
    directory for :func:`config_from_dict` unless ``base_dir`` is given); ``~`` is expanded; URLs
    (``s3://...``, ``file://...``) are kept as written. ``predict.output`` and ``bootstrap.store``
    are resolved against the job's ``output`` folder unless absolute. The dataclasses hold the
    resolved paths only, so ``to_dict()`` is self-contained and
    ``config_from_dict(cfg.to_dict()) == cfg``.
Overlaps
    No output (the ``output`` folder, ``predict.output``, ``bootstrap.store``) may equal, contain
    or lie inside an input (``data.train.path``/``y_path``, ``data.make.path``, ``predict.path``/
    ``y_path``, ``bootstrap.eval.path``/``y_path``); the synthetic ``data.make.path`` counts as
    an input because the fit reads it. Paths are compared after resolving symlinks.
Seeds
    ``model.random_state`` and ``data.make.seed`` default to the top-level ``seed``; the resolved
    value is stored, so ``to_dict()`` shows the seed actually used.
Null
    ``null`` means "not set" for optional values and sections (``gamma``, ``predict``,
    ``cluster.local``, ...); for a value that has a non-null default it is an error.
"""

from __future__ import annotations

import difflib
import math
import numbers
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Any, Literal, NoReturn, get_args

import yaml
from yaml.nodes import MappingNode, ScalarNode

from ..errors import ConfigError, DataNotFoundError

__all__ = [
    "BootstrapConfig",
    "ClusterConfig",
    "DataConfig",
    "EvalGridConfig",
    "JobConfig",
    "LocalClusterConfig",
    "MakeDataConfig",
    "ModelConfig",
    "PredictConfig",
    "SecurityConfig",
    "SourceConfig",
    "config_from_dict",
    "load_config",
    "path_relation",
]

Solver = Literal["random_features", "exact", "nystroem", "auto"]
Kernel = Literal["rbf", "laplacian", "matern", "fourier", "polynomial", "linear", "sigmoid", "periodic"]
#: kernels with a random-feature sampler; the others need solver exact, nystroem or auto
RFF_KERNELS = ("rbf", "laplacian", "matern", "fourier")
#: kernels whose gamma the exact solver's search (ExactKernelRidgeCV) can vary
EXACT_GAMMA_KERNELS = ("rbf", "laplacian", "matern", "polynomial", "sigmoid")
Preconditioner = Literal["rpcholesky", "nystroem", "none"]
GramDType = Literal["auto", "float32", "float64"]
Landmarks = Literal["rpcholesky", "uniform"]
Sampler = Literal["iid", "orthogonal"]
Form = Literal["cos", "cossin"]
DType = Literal["float32", "float64"]
MakeKind = Literal["friedman1", "sine"]
BootstrapMethod = Literal["multinomial", "poisson"]
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]

MATERN_NU = (0.5, 1.5, 2.5)
DASK_SCHEMES = ("tcp", "tls", "ucx", "inproc", "ws", "wss")
#: Features a synthetic generator needs (minimum, maximum or None) and uses by default.
MAKE_FEATURES = {"friedman1": (5, None, 10), "sine": (1, 1, 1)}
EXAMPLE_CONFIG = "configs/quickstart.yaml"


# --------------------------------------------------------------------------------------------
# Schema
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class SourceConfig:
    """A data source: a zarr group (local path or fsspec URL), a ``.npy`` file for X, or a
    Parquet / CSV table (file, glob, or folder of Parquet parts).

    Parameters
    ----------
    path : str
        Resolved location of the zarr group, the ``.npy`` file holding X, or the table.
    x : str or tuple of str, default="X"
        Name of the X array inside the group (ignored for ``.npy``); for a table, the list of
        feature columns.
    y : str, tuple of str or None, default="y"
        Name of the y array inside the group, or the target column(s) of a table; None when the
        source has no targets.
    y_path : str or None, default=None
        Resolved location of y's ``.npy`` file, for ``.npy`` sources only.
    """

    path: str
    x: str | tuple[str, ...] = "X"
    y: str | tuple[str, ...] | None = "y"
    y_path: str | None = None

    @property
    def is_npy(self) -> bool:
        """bool : Whether X is read from a ``.npy`` file rather than a zarr group."""
        return self.path.lower().endswith(".npy")


@dataclass(frozen=True, kw_only=True)
class MakeDataConfig:
    """Synthetic data written to zarr before the fit (``data.make``).

    Parameters
    ----------
    kind : {"friedman1", "sine"}, default="friedman1"
        Friedman #1 (needs ``n_features >= 5``) or the 1-D noisy sine (``n_features == 1``).
    n_samples : int, default=200_000
        Number of rows, > 0.
    n_features : int, default=10 for friedman1, 1 for sine
        Number of columns of X.
    noise : float, default=1.0
        Standard deviation of the Gaussian noise added to y, >= 0.
    seed : int, default=the job's ``seed``
        Seed of the generator, >= 0.
    chunk_rows : int, default=131_072
        Rows per written chunk, > 0.
    path : str
        Resolved location the data is written to: a zarr group (arrays ``X`` and ``y``), or a
        table when it ends in ``.csv`` or ``.parquet`` (columns ``x0 … x{d-1}`` and ``y``);
        reused by the runner when it already holds data made with the same parameters.
    """

    kind: MakeKind = "friedman1"
    n_samples: int = 200_000
    n_features: int = 10
    noise: float = 1.0
    seed: int = 0
    chunk_rows: int = 131_072
    path: str

    @property
    def source(self) -> SourceConfig:
        """SourceConfig : The written data as a training source (arrays ``X`` and ``y``, or a
        table's columns ``x0 … x{d-1}`` and ``y``)."""
        from bigkernel.data.synthetic import table_columns
        from bigkernel.data.tables import is_table

        if is_table(self.path):
            x, y = table_columns(self.n_features)
            return SourceConfig(path=self.path, x=x, y=y)
        return SourceConfig(path=self.path, x="X", y="y")


@dataclass(frozen=True, kw_only=True)
class DataConfig:
    """Training data (``data``): exactly one of ``train`` and ``make`` is set.

    Parameters
    ----------
    train : SourceConfig or None, default=None
        Existing training data.
    make : MakeDataConfig or None, default=None
        Synthetic training data, written before the fit.
    holdout_fraction : float, default=0.2
        Fraction of rows held out for evaluation, ``0 <= f < 1``; rows are assigned by a seeded
        hash of the row index.
    chunk_rows : int or "auto", default="auto"
        Rows per chunk of the streamed pass.
    """

    train: SourceConfig | None = None
    make: MakeDataConfig | None = None
    holdout_fraction: float = 0.2
    chunk_rows: int | Literal["auto"] = "auto"

    @property
    def train_source(self) -> SourceConfig:
        """SourceConfig : Where the training data is read from (``train`` or ``make.path``)."""
        if self.train is not None:
            return self.train
        if self.make is None:
            raise ConfigError("data: neither data.train nor data.make is set")
        return self.make.source


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """The estimator (``model``); names follow scikit-learn.

    Parameters
    ----------
    solver : {"random_features", "exact", "nystroem", "auto"}, default="random_features"
        ``exact``: CG on the blocked Gram matrix (moderate n); ``nystroem``: Nyström features
        in the one-pass primal path; ``auto``: chosen from n and ``memory_budget`` (the job log
        says which and why).
    kernel : {"rbf", "laplacian", "matern", "fourier", "polynomial", "linear", "sigmoid", "periodic"}, default="rbf"
        polynomial, linear, sigmoid and periodic need solver exact, nystroem or auto; fourier
        (the fixed 1-D basis) needs random_features.
    gamma : float, tuple of float, "cv" or None, default=None
        Bandwidth, > 0. Exclusive with ``length_scale`` (gamma = 1 / (2 length_scale²)). A list
        is searched together with alpha (by K-fold CV when alpha or gamma is "cv", else by GCV);
        "cv" — or leaving gamma unset with alpha "cv" — searches 1/d × 10^[-2..1] (7 values).
        Solver random_features searches in the same data pass; solver exact
        (``ExactKernelRidgeCV``) forms one Gram matrix and one eigendecomposition per gamma and
        scores by closed-form leave-one-out where random_features uses K-fold CV (see
        ``alpha``). Solvers nystroem and auto take one gamma.
    length_scale : float, tuple of float or None, default=None
        Bandwidth, > 0; a tuple gives one scale per feature (ARD).
    nu : {0.5, 1.5, 2.5}, default=1.5
        Smoothness of the Matérn kernel (ignored by the other kernels).
    n_components : int, default=1024
        Number of features D, > 0; even for ``form="cossin"`` and ``kernel="fourier"``.
    sampler : {"iid", "orthogonal"}, default="iid"
        Orthogonal random features exist for ``kernel="rbf"`` only.
    form : {"cos", "cossin"}, default="cos"
        ``cos(Wx + b)`` features or paired cos/sin features with D/2 frequencies.
    alpha : float, tuple of float, "gcv", "cv" or "loo", default="gcv"
        Ridge penalty (> 0, finite), a grid of them scored by GCV, "gcv" for the default grid
        scored by GCV, or "cv" for the default grid scored by cross-validation: K-fold
        (``cv: K``) with solver random_features; closed-form leave-one-out with solver exact,
        whose equivalent it is (the exact path has no per-fold sums to subtract; LOO is exact,
        as n refits would give). "loo" (solver exact only) is the same as "cv" there. With
        solver exact, "cv"/"loo" or a gamma list or "cv" select ``ExactKernelRidgeCV``
        (n <= 6000: one O(n³) eigendecomposition per gamma); a gamma list with alpha a number,
        a list or "gcv" is scored by GCV. The mapping::

            solver           alpha: gcv | list        alpha: cv             alpha: loo
            random_features  GCV (one pass)           K-fold (cv: K)        error
            exact            GCV (one gamma: CG;      closed-form LOO       closed-form LOO
                             gamma list/cv: eigh)     (cv: K is an error)
            nystroem, auto   GCV                      error                 error
    cv : int, default=5
        Folds for K-fold cross-validation (>= 2), used when alpha or gamma is "cv" with solver
        random_features (setting it for an exact search is an error: it has no folds).
    standardize : bool, default=False
        Standardize features to mean 0 / sd 1 (a light pre-pass over X; stored in the model).
    fit_intercept : bool, default=True
        Unpenalized intercept by centering.
    dtype : {"float32", "float64"}, default="float64"
        Dtype of the features; sums and solves are always float64.
    random_state : int, default=the job's ``seed``
        Seed of the feature map, >= 0.
    degree : int, default=3
        Polynomial degree (>= 1).
    coef0 : float, default=1.0
        Polynomial and sigmoid offset.
    tol : float, default=1e-6
        Exact solver: CG relative residual, in (0, 1).
    max_iter : int or None, default=None
        Exact solver: CG iterations (default 10·n).
    preconditioner : {"rpcholesky", "nystroem", "none"}, default="rpcholesky"
        Exact solver: low-rank preconditioner.
    rank : int or None, default=None
        Exact solver: preconditioner rank (default from n).
    memory_budget : int, str or None, default=None
        Exact solver and ``auto``: bytes (or a size such as '8GB') for the Gram cache and the
        solver; default half the machine's memory.
    gram_dtype : {"auto", "float64", "float32"}, default="auto"
        Exact solver: dtype of Gram tiles (auto: float64 when the whole matrix fits the budget).
    n_probes : int, default=8
        Exact solver: Hutchinson probes for df(alpha) when n > 3000 (>= 0).
    landmarks : {"rpcholesky", "uniform"}, default="rpcholesky"
        Nyström landmark choice (n_components landmarks).
    """

    solver: Solver = "random_features"
    kernel: Kernel = "rbf"
    gamma: float | tuple[float, ...] | Literal["cv"] | None = None
    length_scale: float | tuple[float, ...] | None = None
    nu: float = 1.5
    n_components: int = 1024
    sampler: Sampler = "iid"
    form: Form = "cos"
    alpha: float | tuple[float, ...] | Literal["gcv", "cv", "loo"] = "gcv"
    cv: int = 5
    standardize: bool = False
    fit_intercept: bool = True
    dtype: DType = "float64"
    random_state: int = 0
    degree: int = 3
    coef0: float = 1.0
    tol: float = 1e-6
    max_iter: int | None = None
    preconditioner: Preconditioner = "rpcholesky"
    rank: int | None = None
    memory_budget: int | str | None = None
    gram_dtype: GramDType = "auto"
    n_probes: int = 8
    landmarks: Landmarks = "rpcholesky"


@dataclass(frozen=True, kw_only=True)
class PredictConfig(SourceConfig):
    """Data to predict after the fit (``predict``): a source plus where predictions go.

    Parameters
    ----------
    path, x, y, y_path
        As in :class:`SourceConfig`; ``y`` defaults to None (targets are optional).
    output : str, default="<output>/predictions.zarr"
        Resolved location of the predictions; relative paths are taken inside the job's
        output folder. The suffix picks the format: ``.csv`` (one file), ``.parquet`` (a folder
        of parts), anything else a zarr group (array ``y_pred``).
    """

    y: str | None = None
    output: str = "predictions.zarr"


@dataclass(frozen=True, kw_only=True)
class SecurityConfig:
    """TLS settings for ``cluster.address`` (passed to ``distributed.Security``).

    Parameters
    ----------
    tls_ca_file, tls_client_cert, tls_client_key : str or None, default=None
        Resolved paths of the PEM files.
    require_encryption : bool, default=False
    """

    tls_ca_file: str | None = None
    tls_client_cert: str | None = None
    tls_client_key: str | None = None
    require_encryption: bool = False


@dataclass(frozen=True, kw_only=True)
class LocalClusterConfig:
    """A LocalCluster started by the job (``cluster.local``).

    Parameters
    ----------
    n_workers : int, default=1
    threads_per_worker : int, default=2
    memory_limit : "auto", int or str, default="auto"
        Per-worker limit: "auto", bytes, or a size such as "4GiB" (Dask's spelling).
    dashboard : bool, default=False
    host : str, default="127.0.0.1"
        Interface the scheduler and workers bind to; loopback unless asked otherwise.
    """

    n_workers: int = 1
    threads_per_worker: int = 2
    memory_limit: int | str = "auto"
    dashboard: bool = False
    host: str = "127.0.0.1"


@dataclass(frozen=True, kw_only=True)
class ClusterConfig:
    """Where the job's Dask work runs (``cluster``): exactly one of ``address`` and ``local``.

    Parameters
    ----------
    address : str or None, default=None
        Address of an existing scheduler, e.g. ``tcp://10.0.0.5:8786``.
    security : SecurityConfig or None, default=None
        TLS settings; only with ``address``.
    local : LocalClusterConfig or None, default=LocalClusterConfig()
        The LocalCluster to start; None when ``address`` is set.
    """

    address: str | None = None
    security: SecurityConfig | None = None
    local: LocalClusterConfig | None = field(default_factory=LocalClusterConfig)


@dataclass(frozen=True, kw_only=True)
class EvalGridConfig:
    """Evaluation points on a grid along one feature (``bootstrap.eval_grid``).

    Parameters
    ----------
    n_points : int, default=200
        Number of grid points, > 0.
    feature : int, default=0
        Column of X the grid runs along, >= 0.
    """

    n_points: int = 200
    feature: int = 0


@dataclass(frozen=True, kw_only=True)
class BootstrapConfig:
    """Bootstrap percentile bands (``bootstrap``); exactly one of ``eval`` and ``eval_grid``.

    Parameters
    ----------
    n_bootstraps : int, default=200
        Number of replicates B, > 0.
    confidence_level : float, default=0.9
        Coverage of the band, ``0 < c < 1``.
    method : {"multinomial", "poisson"}, default="multinomial"
        Multinomial(n, 1/n) draw counts, or Poisson(1) weights.
    eval : SourceConfig or None, default=None
        Evaluation points read from a source.
    eval_grid : EvalGridConfig or None, default=EvalGridConfig()
        Evaluation points on a grid; the default when ``eval`` is not given.
    store : str, default="<output>/bootstrap.zarr"
        Resolved location of the replicate store; relative to the job's output folder.
    plot : bool, default=False
    """

    n_bootstraps: int = 200
    confidence_level: float = 0.9
    method: BootstrapMethod = "multinomial"
    eval: SourceConfig | None = None
    eval_grid: EvalGridConfig | None = field(default_factory=EvalGridConfig)
    store: str = "bootstrap.zarr"
    plot: bool = False


@dataclass(frozen=True, kw_only=True)
class JobConfig:
    """A whole job, as read by :func:`load_config`; all paths resolved.

    Build it with :func:`load_config` or :func:`config_from_dict`: the constructors of these
    dataclasses store what they are given and do not validate.

    Parameters
    ----------
    name : str
        Job name; defaults to the config file's stem.
    output : str
        Resolved output folder.
    overwrite : bool, default=False
        Allow reusing an existing output folder.
    seed : int, default=0
        Default seed for everything not seeded explicitly.
    data : DataConfig
    model : ModelConfig
    predict : PredictConfig or None, default=None
    cluster : ClusterConfig
    bootstrap : BootstrapConfig or None, default=None
    progress : bool, default=True
        Show progress bars (on a terminal).
    plots : bool or "auto", default="auto"
        Write figures and report.md to the output folder; "auto" when matplotlib is installed,
        true makes a missing matplotlib an error.
    log_level : {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}, default="INFO"
    source : str, default="<dict>"
        Absolute path of the config file, or "<dict>"; not part of equality or ``to_dict``.
    base_dir : str, default=""
        Directory relative paths were resolved against; not part of equality or ``to_dict``.
    """

    name: str
    output: str
    overwrite: bool = False
    seed: int = 0
    data: DataConfig
    model: ModelConfig = field(default_factory=ModelConfig)
    predict: PredictConfig | None = None
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    bootstrap: BootstrapConfig | None = None
    progress: bool = True
    plots: bool | Literal["auto"] = "auto"
    log_level: LogLevel = "INFO"
    source: str = field(default="<dict>", compare=False)
    base_dir: str = field(default="", compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """Return the resolved config as plain data (dicts, lists, str, numbers, bool, None).

        Returns
        -------
        dict
            JSON- and YAML-serialisable; ``config_from_dict(cfg.to_dict()) == cfg``.
        """
        return _plain(self)

    def to_yaml(self) -> str:
        """Return :meth:`to_dict` as YAML text that :func:`load_config` reads back.

        Returns
        -------
        str
        """
        return yaml.safe_dump(self.to_dict(), sort_keys=False, default_flow_style=False)

    def inputs(self) -> dict[str, str]:
        """Return the locations the job reads, by dotted key.

        Returns
        -------
        dict of str to str
            For example ``{"data.train.path": "/abs/data/train.zarr"}``.
        """
        found: dict[str, str | None] = {}
        for prefix, source in (
            ("data.train", self.data.train),
            ("predict", self.predict),
            ("bootstrap.eval", self.bootstrap.eval if self.bootstrap else None),
        ):
            if source is not None:
                found[f"{prefix}.path"] = source.path
                found[f"{prefix}.y_path"] = source.y_path
        if self.data.make is not None:
            found["data.make.path"] = self.data.make.path
        return {key: path for key, path in found.items() if path}

    def outputs(self) -> dict[str, str]:
        """Return the locations the job writes, by dotted key.

        Returns
        -------
        dict of str to str
            ``output`` always; ``predict.output`` and ``bootstrap.store`` when those sections
            are set.
        """
        found = {"output": self.output}
        if self.predict is not None:
            found["predict.output"] = self.predict.output
        if self.bootstrap is not None:
            found["bootstrap.store"] = self.bootstrap.store
        return found


def _plain(value: Any) -> Any:
    """Convert dataclasses and tuples to dicts and lists, recursively."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value) if f.compare}
    if isinstance(value, (tuple, list)):
        return [_plain(item) for item in value]
    return value


def _keys(cls: type) -> tuple[str, ...]:
    """Return the YAML keys of a schema dataclass (its compared fields)."""
    return tuple(f.name for f in fields(cls) if f.compare)


#: Valid keys of every section, by dotted prefix; also used for "did you mean model.alpha?".
SECTION_KEYS: dict[str, tuple[str, ...]] = {
    "": _keys(JobConfig),
    "data": _keys(DataConfig),
    "data.train": _keys(SourceConfig),
    "data.make": _keys(MakeDataConfig),
    "model": _keys(ModelConfig),
    "predict": _keys(PredictConfig),
    "cluster": _keys(ClusterConfig),
    "cluster.security": _keys(SecurityConfig),
    "cluster.local": _keys(LocalClusterConfig),
    "bootstrap": _keys(BootstrapConfig),
    "bootstrap.eval": _keys(SourceConfig),
    "bootstrap.eval_grid": _keys(EvalGridConfig),
}


# --------------------------------------------------------------------------------------------
# Public entry points
# --------------------------------------------------------------------------------------------


def load_config(path: str | os.PathLike[str]) -> JobConfig:
    """Read and validate a job config file.

    Parameters
    ----------
    path : str or path-like
        The YAML file. Relative paths inside it are resolved against its directory.

    Returns
    -------
    JobConfig

    Raises
    ------
    DataNotFoundError
        If the file does not exist.
    ConfigError
        If the file is not valid YAML, uses Python tags or duplicate keys, is empty, or does
        not follow the schema; the message lists every problem as ``file:line: key: message``.
    """
    shown = os.fspath(path)
    raw = _parse_yaml(_read_text(shown), shown)
    return config_from_dict(raw, source=shown)


def config_from_dict(
    d: Mapping[str, Any], source: str | os.PathLike[str] = "<dict>", *, base_dir: str | None = None
) -> JobConfig:
    """Validate an already-parsed config mapping.

    Parameters
    ----------
    d : mapping
        The config, shaped like the YAML file (for example ``JobConfig.to_dict()``).
    source : str or path-like, default="<dict>"
        Where ``d`` came from; named in every error message. When it is a file path, the
        default ``name`` is its stem and relative paths are resolved against its directory.
    base_dir : str or None, default=None
        Directory to resolve relative paths against, overriding the one implied by ``source``
        (the current directory for "<dict>").

    Returns
    -------
    JobConfig

    Raises
    ------
    ConfigError
        Listing every problem found.
    """
    shown = os.fspath(source)
    is_file = not (shown.startswith("<") and shown.endswith(">"))
    if base_dir is None:
        base_dir = os.path.dirname(os.path.abspath(shown)) if is_file else os.getcwd()
    if not isinstance(d, Mapping):
        raise ConfigError(
            f"{shown}: the top level of a job config must be a mapping of keys "
            f"({', '.join(SECTION_KEYS[''])}), found {_show(d)}"
        )
    ctx = _Context(
        shown=shown,
        source=os.path.abspath(shown) if is_file else shown,
        stem=os.path.splitext(os.path.basename(shown))[0] if is_file else None,
        base_dir=os.path.abspath(os.path.expanduser(base_dir)),
        root=d,
    )
    return _parse_job(ctx)


# --------------------------------------------------------------------------------------------
# YAML reading
# --------------------------------------------------------------------------------------------


class _LineDict(dict):  # type: ignore[type-arg]
    """A dict that remembers the (1-based) line of itself and of each of its keys."""

    line: int | None = None
    key_lines: dict[Any, int]

    def __init__(self) -> None:
        super().__init__()
        self.key_lines = {}


class _JobLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys and any non-standard tag, and records lines."""

    def __init__(self, stream: str, shown: str) -> None:
        super().__init__(stream)
        self.shown = shown
        self.duplicates: list[str] = []

    def construct_undefined(self, node: yaml.Node) -> NoReturn:
        """Refuse tags SafeLoader has no constructor for (``!!python/...``, ``!local``)."""
        tag = node.tag.replace("tag:yaml.org,2002:", "!!", 1)
        raise ConfigError(
            f"{self.shown}:{node.start_mark.line + 1}: the tag {tag} is not allowed: "
            "tags that build Python objects (such as !!python/object) or custom tags are "
            "never executed in job configs; write plain values"
        )

    def construct_line_map(self, node: MappingNode) -> Iterator[_LineDict]:
        """Build a mapping as a :class:`_LineDict`, noting duplicate keys."""
        data = _LineDict()
        data.line = node.start_mark.line + 1
        yield data
        self._note_duplicates(node)
        data.update(self.construct_mapping(node))
        for key_node, _ in node.value:  # merged (<<) keys first, own keys last, as constructed
            if isinstance(key_node, ScalarNode):
                data.key_lines[self.construct_object(key_node)] = key_node.start_mark.line + 1

    def _note_duplicates(self, node: MappingNode) -> None:
        """Record keys written twice in one mapping (keys brought in by ``<<`` merges excepted)."""
        first: dict[Any, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node)
            line = key_node.start_mark.line + 1
            if key in first:
                self.duplicates.append(
                    f"{self.shown}:{line}: duplicate key {key!r} (lines {first[key]} and {line}); "
                    "YAML would silently keep only the last value — remove one"
                )
            else:
                first[key] = line


_JobLoader.add_constructor("tag:yaml.org,2002:map", _JobLoader.construct_line_map)
_JobLoader.add_constructor(None, _JobLoader.construct_undefined)


def _read_text(shown: str) -> str:
    """Read the config file as UTF-8 text; a missing file is a DataNotFoundError."""
    try:
        with open(shown, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        looked = "" if os.path.isabs(shown) else f" (looked for {os.path.abspath(shown)})"
        raise DataNotFoundError(
            f"job config not found: {shown}{looked}; give the path of a YAML job file, "
            f"e.g. `bigkernel run {EXAMPLE_CONFIG}`"
        ) from None
    except IsADirectoryError:
        raise ConfigError(
            f"{shown}: is a directory; give the path of a YAML job file, "
            f"e.g. `bigkernel run {EXAMPLE_CONFIG}`"
        ) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{shown}: not UTF-8 text ({exc.reason} at byte {exc.start}); a job config is YAML"
        ) from None


def _parse_yaml(text: str, shown: str) -> Any:
    """Parse one YAML document safely; every YAML problem becomes a ConfigError."""
    loader = _JobLoader(text, shown)
    try:
        data = loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        raise ConfigError(_yaml_error_message(exc, shown)) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{shown}: not valid YAML: {exc}") from None
    finally:
        loader.dispose()
    if loader.duplicates:
        raise ConfigError("\n".join(loader.duplicates))
    if data is None:
        raise ConfigError(
            f"{shown}: the job config is empty; it needs at least `output:` and `data:` "
            f"(see {EXAMPLE_CONFIG})"
        )
    return data


def _yaml_error_message(exc: yaml.MarkedYAMLError, shown: str) -> str:
    """Format a YAML scanner/parser/constructor error as ``file:line:column: problem``."""
    mark = exc.problem_mark or exc.context_mark
    where = f"{shown}:{mark.line + 1}:{mark.column + 1}" if mark else shown
    is_syntax = not isinstance(exc, yaml.constructor.ConstructorError)
    kind = "YAML syntax error" if is_syntax else "YAML error"
    message = f"{where}: {kind}: {exc.problem or exc.context}"
    if exc.context and exc.problem and exc.context_mark:
        message += f" ({exc.context}, line {exc.context_mark.line + 1})"
    return message


# --------------------------------------------------------------------------------------------
# Value checks: each takes a raw value and returns the typed value or raises _Invalid
# --------------------------------------------------------------------------------------------


class _Invalid(Exception):
    """A value failed its check; the message is reported against the key."""


Check = Callable[[Any], Any]

_NUMBER_TEXT = re.compile(r"[-+]?(?:\d[\d_]*(?:\.[\d_]*)?|\.\d[\d_]*)(?:[eE][-+]?\d+)?")
_NUMBER_PARTS = re.compile(r"([-+]?)(\d*)\.?(\d*)(?:[eE]([-+]?)(\d+))?")
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
_BYTES = re.compile(r"\d+(?:\.\d+)?\s*(?:[kmgtp]i?b|[kmgtp]|b)?", re.IGNORECASE)


def _show(value: Any) -> str:
    """Describe a found value with its YAML type, e.g. ``'1e-3' (string)``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"{str(value).lower()} (boolean)"
    kinds = ((str, "string"), (numbers.Integral, "integer"), (numbers.Real, "number"),
             (Mapping, "mapping"), (list, "list"))
    kind = next((name for cls, name in kinds if isinstance(value, cls)), type(value).__name__)
    return f"{value!r} ({kind})"


def _fail(expected: str, value: Any, hint: str = "") -> NoReturn:
    """Raise the standard "expected ..., found ..." problem."""
    raise _Invalid(f"expected {expected}, found {_show(value)}{hint}")


def _yaml_number_spelling(text: str, integer: bool) -> str:
    """Return how to write a number YAML 1.1 read as text (``1e-3`` -> ``1.0e-3``)."""
    if integer:
        number = float(text.replace("_", ""))
        return str(int(number)) if number.is_integer() else ""
    match = _NUMBER_PARTS.fullmatch(text.replace("_", ""))
    if match is None:  # pragma: no cover - only called after _NUMBER_TEXT matched
        return ""
    sign, whole, frac, exp_sign, exp = match.groups()
    spelled = f"{sign}{whole or '0'}.{frac or '0'}"
    return spelled + (f"e{exp_sign or '+'}{exp}" if exp is not None else "")


def _reject_non_number(value: Any, expected: str, integer: bool) -> None:
    """Raise unless ``value`` is a real number; explain booleans and numbers read as text."""
    if isinstance(value, bool):
        _fail(expected, value, "; booleans are not numbers")
    if isinstance(value, str) and _NUMBER_TEXT.fullmatch(value.strip()):
        spelled = _yaml_number_spelling(value.strip(), integer)
        fix = f"; write {spelled}" if spelled else ""
        raise _Invalid(
            f"expected {expected}, found {_show(value)}: YAML 1.1 reads {value.strip()} as text, "
            f"not a number (a float needs a decimal point and a signed exponent, and quotes "
            f"always make text){fix}"
        )
    if not isinstance(value, numbers.Real):
        _fail(expected, value)


def _bounds(gt: float | None, ge: float | None, lt: float | None, le: float | None) -> str:
    """Describe bounds such as ``>= 0 and < 1``."""
    parts = [f"{op} {bound:g}" for op, bound in ((">", gt), (">=", ge), ("<", lt), ("<=", le))
             if bound is not None]
    return " and ".join(parts)


def _within_bounds(value: float, gt: float | None, ge: float | None, lt: float | None,
                   le: float | None) -> bool:
    """Whether ``value`` satisfies every given bound."""
    return ((gt is None or value > gt) and (ge is None or value >= ge)
            and (lt is None or value < lt) and (le is None or value <= le))


def _integer(*, gt: int | None = None, ge: int | None = None) -> Check:
    """Check for an integer (not a boolean, not a float) within bounds."""
    expected = f"an integer {_bounds(gt, ge, None, None)}".strip()

    def check(value: Any) -> int:
        _reject_non_number(value, expected, integer=True)
        if not isinstance(value, numbers.Integral):
            hint = "; write it without a decimal point" if float(value).is_integer() else ""
            _fail(expected, value, hint)
        if not _within_bounds(int(value), gt, ge, None, None):
            _fail(expected, value)
        return int(value)

    return check


def _number(*, gt: float | None = None, ge: float | None = None, lt: float | None = None,
            le: float | None = None, expected: str | None = None) -> Check:
    """Check for a finite real number (not a boolean) within bounds; returns a float."""
    expected = expected or f"a number {_bounds(gt, ge, lt, le)}".strip()

    def check(value: Any) -> float:
        _reject_non_number(value, expected, integer=False)
        number = float(value)
        if math.isnan(number):
            _fail(expected, value, "; NaN is not allowed")
        if math.isinf(number):
            _fail(expected, value, "; the value must be finite")
        if not _within_bounds(number, gt, ge, lt, le):
            _fail(expected, value)
        return number

    return check


def _positive_or_list(expected: str, *, word: str | tuple[str, ...] | None = None) -> Check:
    """Check for a number > 0, a non-empty list of them, or (if given) a keyword in ``word``."""
    scalar = _number(gt=0, expected=expected)
    words = (word,) if isinstance(word, str) else tuple(word or ())

    def check(value: Any) -> float | tuple[float, ...] | str:
        if words and isinstance(value, str) and value.strip().lower() in words:
            return value.strip().lower()
        if isinstance(value, (list, tuple)):
            if not value:
                _fail(expected, value, "; the list is empty")
            return tuple(_list_item(scalar, index, item) for index, item in enumerate(value))
        return scalar(value)

    return check


def _list_item(check: Check, index: int, item: Any) -> Any:
    """Check one list item, naming its index in the problem."""
    try:
        return check(item)
    except _Invalid as exc:
        raise _Invalid(f"item {index}: {exc}") from None


def _text_or_list(value: Any) -> str | tuple[str, ...]:
    """Check for non-empty text or a non-empty list of it (table columns)."""
    if isinstance(value, (list, tuple)):
        if not value:
            _fail("a name or a non-empty list of column names", value, "; the list is empty")
        return tuple(_list_item(_text, index, item) for index, item in enumerate(value))
    return _text(value)


def _bool_or_auto(value: Any) -> bool | str:
    """Check for true, false or "auto"."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    if not isinstance(value, bool):
        _fail('true, false or "auto"', value)
    return value


def _boolean(value: Any) -> bool:
    """Check for true/false."""
    if not isinstance(value, bool):
        _fail("true or false", value)
    return value


def _text(value: Any) -> str:
    """Check for non-empty text."""
    if not isinstance(value, str) or not value.strip():
        hint = "; quote it to make it text" if isinstance(value, (numbers.Real, bool)) else ""
        _fail("non-empty text", value, hint)
    return value


def _choice(options: Sequence[str], *, upper: bool = False) -> Check:
    """Check for one of ``options`` (case-insensitive and upper-cased if ``upper``)."""
    expected = "one of " + ", ".join(repr(option) for option in options)

    def check(value: Any) -> str:
        if not isinstance(value, str):
            _fail(expected, value)
        word = value.upper() if upper else value
        if word not in options:
            close = difflib.get_close_matches(word if upper else word.lower(), options, n=1)
            _fail(expected, value, f"; did you mean {close[0]!r}?" if close else "")
        return word

    return check


def _nu(value: Any) -> float:
    """Check for a Matérn smoothness the random-feature sampler supports."""
    expected = "one of " + ", ".join(str(nu) for nu in MATERN_NU)
    number = _number(expected=expected)(value)
    if number not in MATERN_NU:
        _fail(expected, value)
    return number


def _chunk_rows(value: Any) -> int | str:
    """Check for "auto" or a number of rows > 0."""
    if value == "auto":
        return "auto"
    if isinstance(value, str) and not _NUMBER_TEXT.fullmatch(value.strip()):
        _fail("'auto' or an integer > 0", value)
    return _integer(gt=0)(value)


def _memory_limit(value: Any) -> int | str:
    """Check for "auto", a number of bytes > 0 or a size such as "4GiB"."""
    expected = "'auto', a number of bytes > 0, or a size such as '4GiB'"
    if isinstance(value, str) and (value == "auto" or _BYTES.fullmatch(value.strip())):
        return value
    if isinstance(value, str):
        _fail(expected, value)
    return _integer(gt=0)(value)


def _address(value: Any) -> str:
    """Check for a Dask scheduler address such as ``tcp://10.0.0.5:8786``."""
    expected = "a scheduler address such as 'tcp://10.0.0.5:8786'"
    text = _text(value)
    scheme, sep, rest = text.partition("://")
    if any(char.isspace() for char in text) or (sep and (scheme not in DASK_SCHEMES or not rest)):
        _fail(expected, value, f"; known schemes: {', '.join(DASK_SCHEMES)}")
    return text


def _location(base: str) -> Check:
    """Check for a path or URL; resolve relative local paths against ``base``."""

    def check(value: Any) -> str:
        return _resolve(_text(value), base)

    return check


def _resolve(location: str, base: str) -> str:
    """Resolve a local path against ``base`` (``~`` expanded); keep URLs as written."""
    if _URL.match(location):
        return location
    return os.path.normpath(os.path.join(base, os.path.expanduser(location)))


# --------------------------------------------------------------------------------------------
# Sections: a mapping, its dotted prefix, and the problems found in it
# --------------------------------------------------------------------------------------------


@dataclass
class _Context:
    """State shared while one config is parsed."""

    shown: str
    source: str
    stem: str | None
    base_dir: str
    root: Mapping[Any, Any]
    problems: list[tuple[int, str]] = field(default_factory=list)
    seed: int = 0
    output: str = ""

    def report(self, key: str, message: str, line: int | None = None) -> None:
        """Record a problem with ``key``; the line is looked up when not given."""
        line = line if line is not None else self.line_of(key)
        where = f"{self.shown}:{line}" if line else self.shown
        self.problems.append((line or 0, f"{where}: {key or '(top level)'}: {message}"))

    def line_of(self, dotted: str) -> int | None:
        """Return the line of the deepest existing key along ``dotted``, if known."""
        node: Any = self.root
        line = getattr(node, "line", None)
        for part in dotted.split(".") if dotted else ():
            if not isinstance(node, Mapping) or part not in node:
                break
            line = getattr(node, "key_lines", {}).get(part, line)
            node = node[part]
        return line

    def raise_if_any(self) -> None:
        """Raise one ConfigError listing every recorded problem, in file order."""
        problems = [text for _, text in sorted(self.problems, key=lambda item: item[0])]
        if len(problems) == 1:
            raise ConfigError(problems[0])
        if problems:
            listed = "\n".join(f"  {problem}" for problem in problems)
            raise ConfigError(f"{len(problems)} problems in job config {self.shown}:\n{listed}")


class _Section:
    """One mapping of the config; reads typed values and reports problems by dotted key."""

    def __init__(self, ctx: _Context, raw: Mapping[Any, Any], prefix: str) -> None:
        self.ctx = ctx
        self.raw = raw
        self.prefix = prefix
        self.lines: dict[Any, int] = getattr(raw, "key_lines", {})
        self.line: int | None = getattr(raw, "line", None)
        self.reported = 0
        self._check_keys(SECTION_KEYS[prefix])

    def dotted(self, key: str) -> str:
        """Return the full dotted name of ``key``."""
        return f"{self.prefix}.{key}" if self.prefix else key

    def report(self, key: str | None, message: str) -> None:
        """Record a problem with ``key`` (or with the section itself)."""
        self.reported += 1
        line = self.lines.get(key, self.line) if key is not None else self.line
        self.ctx.report(self.dotted(key) if key is not None else self.prefix, message, line)

    @property
    def clean(self) -> bool:
        """bool : Whether no problem was reported in this section (so cross-checks are fair)."""
        return self.reported == 0

    def is_set(self, key: str) -> bool:
        """Whether ``key`` is present with a non-null value."""
        return self.raw.get(key) is not None

    def value(self, key: str, check: Check, default: Any, *, nullable: bool = False) -> Any:
        """Return the checked value of ``key``.

        ``default`` when the key is absent or its value invalid; None when it is null and
        ``nullable``.
        """
        if key not in self.raw:
            return default
        if nullable and self.raw[key] is None:
            return None
        try:
            return check(self.raw[key])
        except _Invalid as exc:
            self.report(key, str(exc))
            return default

    def required(self, key: str, check: Check, what: str) -> Any:
        """Return the checked value of a required ``key``; "" if missing or invalid."""
        if not self.is_set(key):
            self.report(key, f"missing: give {what}")
            return ""
        return self.value(key, check, "")

    def section(self, key: str) -> _Section | None:
        """Return the sub-mapping ``key`` as a section; None if absent, null or not a mapping."""
        if not self.is_set(key):
            return None
        sub = self.raw[key]
        if not isinstance(sub, Mapping):
            keys = SECTION_KEYS[self.dotted(key)]
            is_path = isinstance(sub, str) and "path" in keys
            hint = f"; write `{key}: {{path: {sub}}}`" if is_path else ""
            self.report(key, f"expected a mapping with keys {', '.join(keys)}; found "
                        f"{_show(sub)}{hint}")
            return None
        return _Section(self.ctx, sub, self.dotted(key))

    def optional_section(self, key: str) -> _Section:
        """Return the sub-mapping ``key``, an empty section when absent (all defaults)."""
        found = self.section(key)
        return found if found is not None else _Section(self.ctx, {}, self.dotted(key))

    def _check_keys(self, allowed: Sequence[str]) -> None:
        """Report keys that are not text or not in ``allowed``, with close matches."""
        for key in self.raw:
            if not isinstance(key, str):
                self.report(key, f"the key {_show(key)} in {self.prefix or 'the top level'} is "
                            "not text (YAML 1.1 reads yes/no/on/off as booleans); quote it")
            elif key not in allowed:
                self.report(key, _unknown_key_message(key, self.prefix, allowed))


def _unknown_key_message(key: str, prefix: str, allowed: Sequence[str]) -> str:
    """Describe an unknown key with close matches here, or the section it belongs to."""
    close = difflib.get_close_matches(key, allowed, n=3)
    if not close:
        close = [f"{other}.{key}" for other, keys in SECTION_KEYS.items()
                 if other and other != prefix and key in keys][:3]
    hint = f"did you mean {' or '.join(repr(name) for name in close)}? " if close else ""
    return (f"unknown key {key!r}; {hint}valid keys in {prefix or 'the top level'}: "
            f"{', '.join(allowed)}")


# --------------------------------------------------------------------------------------------
# Parsers, one per section
# --------------------------------------------------------------------------------------------


def _parse_job(ctx: _Context) -> JobConfig:
    """Parse and check the whole config; raise one ConfigError listing every problem."""
    top = _Section(ctx, ctx.root, "")
    ctx.seed = top.value("seed", _integer(ge=0), 0)
    ctx.output = top.required("output", _location(ctx.base_dir), "the output folder, e.g. runs/job")
    default_name = ctx.stem or os.path.basename(ctx.output.rstrip("/" + os.sep)) or "job"
    data = _parse_data(top)
    job = JobConfig(
        name=top.value("name", _text, default_name),
        output=ctx.output,
        overwrite=top.value("overwrite", _boolean, False),
        seed=ctx.seed,
        data=data,
        model=_parse_model(top.optional_section("model"), data),
        predict=_parse_predict(top.section("predict")),
        cluster=_parse_cluster(top.optional_section("cluster")),
        bootstrap=_parse_bootstrap(top.section("bootstrap"), data),
        progress=top.value("progress", _boolean, True),
        plots=top.value("plots", _bool_or_auto, "auto"),
        log_level=top.value("log_level", _choice(get_args(LogLevel), upper=True), "INFO"),
        source=ctx.source,
        base_dir=ctx.base_dir,
    )
    if not ctx.problems:
        _check_overlaps(job, ctx)
    ctx.raise_if_any()
    return job


def _parse_source(sec: _Section, *, y_default: str | None, needs_y: bool) -> dict[str, Any]:
    """Parse the fields of a data source (path, x, y, y_path) into keyword arguments."""
    path = sec.required("path", _location(sec.ctx.base_dir), "a zarr group or a .npy file")
    x = sec.value("x", _text_or_list, "X")
    y = sec.value("y", _text_or_list, y_default, nullable=True)
    y_path = sec.value("y_path", _location(sec.ctx.base_dir), None, nullable=True)
    is_npy = path.lower().endswith(".npy")
    if y_path is not None and path and not is_npy:
        sec.report("y_path", "y_path is only for a .npy path; name y's array inside the zarr "
                   "group with `y:` instead")
    elif needs_y and is_npy and y_path is None:
        sec.report("path", "a .npy file holds X only: give the .npy file of y as `y_path:`")
    elif needs_y and not is_npy and y is None:
        sec.report("y", "training data needs targets: give the name of the y array (default 'y')")
    return {"path": path, "x": x, "y": y, "y_path": y_path}


def _parse_make(sec: _Section) -> MakeDataConfig:
    """Parse ``data.make`` and check the feature count fits the generator."""
    kind = sec.value("kind", _choice(get_args(MakeKind)), "friedman1")
    low, high, default_features = MAKE_FEATURES[kind]
    seed = sec.value("seed", _integer(ge=0), None, nullable=True)
    make = MakeDataConfig(
        kind=kind,
        n_samples=sec.value("n_samples", _integer(gt=0), 200_000),
        n_features=sec.value("n_features", _integer(gt=0), default_features),
        noise=sec.value("noise", _number(ge=0), 1.0),
        seed=sec.ctx.seed if seed is None else seed,
        chunk_rows=sec.value("chunk_rows", _integer(gt=0), 131_072),
        path=sec.required("path", _location(sec.ctx.base_dir), "the zarr group or table to "
                          "write, e.g. data/synthetic.zarr or data/synthetic.csv"),
    )
    too_few, too_many = make.n_features < low, high is not None and make.n_features > high
    if sec.clean and (too_few or too_many):
        allowed = f"exactly {low}" if high == low else f">= {low}"
        sec.report("n_features", f"kind {kind!r} needs n_features {allowed}, found "
                   f"{make.n_features}")
    return make


def _parse_data(top: _Section) -> DataConfig:
    """Parse ``data``: exactly one of ``train`` and ``make``, plus chunking and holdout."""
    if not top.is_set("data"):
        top.report("data", "missing: give data.train (existing data) or data.make (synthetic)")
    sec = top.section("data")
    if sec is None:
        return DataConfig()
    if sec.is_set("train") == sec.is_set("make"):
        sec.report(None, "give exactly one of data.train (existing data) and data.make "
                   "(synthetic data)")
    train_sec, make_sec = sec.section("train"), sec.section("make")
    return DataConfig(
        train=SourceConfig(**_parse_source(train_sec, y_default="y", needs_y=True))
        if train_sec else None,
        make=_parse_make(make_sec) if make_sec else None,
        holdout_fraction=sec.value("holdout_fraction", _number(ge=0, lt=1), 0.2),
        chunk_rows=sec.value("chunk_rows", _chunk_rows, "auto"),
    )


def _parse_model(sec: _Section, data: DataConfig) -> ModelConfig:
    """Parse ``model`` and check the fields that constrain one another."""
    model = ModelConfig(
        solver=sec.value("solver", _choice(get_args(Solver)), "random_features"),
        kernel=sec.value("kernel", _choice(get_args(Kernel)), "rbf"),
        gamma=sec.value("gamma", _positive_or_list(
            "a number > 0, a non-empty list of numbers > 0 (searched), or 'cv'", word="cv"), None,
            nullable=True),
        length_scale=sec.value("length_scale", _positive_or_list(
            "a number > 0 or a non-empty list of numbers > 0 (one per feature)"), None,
            nullable=True),
        nu=sec.value("nu", _nu, 1.5),
        n_components=sec.value("n_components", _integer(gt=0), 1024),
        sampler=sec.value("sampler", _choice(get_args(Sampler)), "iid"),
        form=sec.value("form", _choice(get_args(Form)), "cos"),
        alpha=sec.value("alpha", _positive_or_list(
            "a number > 0, a non-empty list of numbers > 0, 'loo', 'gcv' or 'cv'", word=("gcv", "cv", "loo")),
            "gcv"),
        cv=sec.value("cv", _integer(gt=1), 5),
        standardize=sec.value("standardize", _boolean, False),
        fit_intercept=sec.value("fit_intercept", _boolean, True),
        dtype=sec.value("dtype", _choice(get_args(DType)), "float64"),
        random_state=sec.value("random_state", _integer(ge=0), None, nullable=True),
        degree=sec.value("degree", _integer(gt=0), 3),
        coef0=sec.value("coef0", _number(), 1.0),
        tol=sec.value("tol", _number(gt=0, lt=1), 1e-6),
        max_iter=sec.value("max_iter", _integer(gt=0), None, nullable=True),
        preconditioner=sec.value("preconditioner", _choice(get_args(Preconditioner)), "rpcholesky"),
        rank=sec.value("rank", _integer(gt=0), None, nullable=True),
        memory_budget=sec.value("memory_budget", _byte_size, None, nullable=True),
        gram_dtype=sec.value("gram_dtype", _choice(get_args(GramDType)), "auto"),
        n_probes=sec.value("n_probes", _integer(ge=0), 8),
        landmarks=sec.value("landmarks", _choice(get_args(Landmarks)), "rpcholesky"),
    )
    if model.random_state is None:
        model = replace(model, random_state=sec.ctx.seed)
    _check_model(sec, model, data)
    return model


def _check_model(sec: _Section, model: ModelConfig, data: DataConfig) -> None:
    """Report model fields that contradict one another or the synthetic data."""
    if not sec.clean:
        return
    if model.gamma is not None and model.length_scale is not None:
        sec.report("length_scale", "give gamma or length_scale, not both: they set the same "
                   "bandwidth (gamma = 1 / (2 * length_scale**2))")
    if model.sampler == "orthogonal" and model.kernel != "rbf":
        sec.report("sampler", f"sampler 'orthogonal' exists for kernel 'rbf' only, found "
                   f"kernel {model.kernel!r}; use sampler 'iid'")
    if model.n_components % 2 and (model.form == "cossin" or model.kernel == "fourier"):
        why = "form 'cossin'" if model.form == "cossin" else "kernel 'fourier'"
        sec.report("n_components", f"must be even with {why} (each frequency gives a cos and a "
                   f"sin feature), found {model.n_components}")
    _check_solver(sec, model)
    if isinstance(model.length_scale, tuple) and data.make is not None and not sec.ctx.problems:
        if len(model.length_scale) != data.make.n_features:
            sec.report("length_scale", f"expected one length scale per feature "
                       f"({data.make.n_features}, data.make.n_features), found "
                       f"{len(model.length_scale)}")


def _check_solver(sec: _Section, model: ModelConfig) -> None:
    """Report kernels and searches the chosen solver does not have."""
    if model.solver == "random_features" and model.kernel not in RFF_KERNELS:
        sec.report("kernel", f"kernel {model.kernel!r} has no random-feature sampler; use solver "
                   f"exact, nystroem or auto, or one of {', '.join(RFF_KERNELS)}")
    if model.solver != "random_features" and model.kernel == "fourier":
        sec.report("kernel", "kernel 'fourier' is the fixed 1-D basis of the random-feature solver; "
                   "use solver random_features")
    searched = isinstance(model.gamma, tuple) or "cv" in (model.gamma, model.alpha)
    if model.alpha == "loo" and model.solver != "exact":
        sec.report("alpha", f"alpha 'loo' (closed-form leave-one-out) exists for solver exact only, "
                   f"found solver {model.solver!r}; with random_features use alpha 'cv' (K-fold, "
                   "cv: K) or 'gcv'")
    elif model.solver not in ("random_features", "exact") and searched:
        sec.report("solver", f"the (gamma, alpha) search of lists or 'cv' exists for solvers "
                   f"random_features and exact only, found solver {model.solver!r}; give one gamma "
                   "and an alpha, a list of alphas or 'gcv'")
    if model.solver == "exact" and (searched or model.alpha == "loo"):
        if sec.is_set("cv"):
            sec.report("cv", "solver exact has no K-fold CV: its (gamma, alpha) search scores by "
                       "closed-form leave-one-out (alpha 'cv' or 'loo') or GCV; remove cv")
        gamma_searched = isinstance(model.gamma, tuple) or model.gamma == "cv"
        if gamma_searched and model.kernel not in EXACT_GAMMA_KERNELS:
            sec.report("gamma", f"kernel {model.kernel!r} has no gamma to search; gamma lists and "
                       f"'cv' exist for kernels {', '.join(EXACT_GAMMA_KERNELS)} (use alpha 'loo' "
                       "to search alpha alone)")


def _byte_size(value: Any) -> int | str:
    """Check for a number of bytes > 0 or a size such as "8GB"."""
    if isinstance(value, str):
        if _BYTES.fullmatch(value.strip()):
            return value
        _fail("a number of bytes > 0 or a size such as '8GB'", value)
    return _integer(gt=0)(value)


def _parse_predict(sec: _Section | None) -> PredictConfig | None:
    """Parse ``predict``; its output is resolved inside the job's output folder."""
    if sec is None:
        return None
    source = _parse_source(sec, y_default=None, needs_y=False)
    base = sec.ctx.output or sec.ctx.base_dir
    output = sec.value("output", _location(base), _resolve("predictions.zarr", base))
    return PredictConfig(**source, output=output)


def _parse_cluster(sec: _Section) -> ClusterConfig:
    """Parse ``cluster``: a scheduler address or a LocalCluster, not both."""
    address = sec.value("address", _address, None, nullable=True)
    if address is not None and sec.is_set("local"):
        sec.report("local", "cluster.address and cluster.local are exclusive: connect to the "
                   "scheduler at address, or start a local cluster — remove one")
    security_sec = sec.section("security")
    if security_sec is not None and address is None:
        sec.report("security", "TLS settings are for a scheduler at cluster.address; the local "
                   "cluster is bound to this machine")
    return ClusterConfig(
        address=address,
        security=_parse_security(security_sec) if security_sec else None,
        local=_parse_local(sec.optional_section("local")) if address is None else None,
    )


def _parse_security(sec: _Section) -> SecurityConfig:
    """Parse ``cluster.security`` (paths resolved like every other path)."""
    where = _location(sec.ctx.base_dir)
    return SecurityConfig(
        tls_ca_file=sec.value("tls_ca_file", where, None, nullable=True),
        tls_client_cert=sec.value("tls_client_cert", where, None, nullable=True),
        tls_client_key=sec.value("tls_client_key", where, None, nullable=True),
        require_encryption=sec.value("require_encryption", _boolean, False),
    )


def _parse_local(sec: _Section) -> LocalClusterConfig:
    """Parse ``cluster.local``."""
    return LocalClusterConfig(
        n_workers=sec.value("n_workers", _integer(gt=0), 1),
        threads_per_worker=sec.value("threads_per_worker", _integer(gt=0), 2),
        memory_limit=sec.value("memory_limit", _memory_limit, "auto"),
        dashboard=sec.value("dashboard", _boolean, False),
        host=sec.value("host", _text, "127.0.0.1"),
    )


def _parse_bootstrap(sec: _Section | None, data: DataConfig) -> BootstrapConfig | None:
    """Parse ``bootstrap``: evaluation points from ``eval`` or ``eval_grid``, not both."""
    if sec is None:
        return None
    if sec.is_set("eval") and sec.is_set("eval_grid"):
        sec.report("eval_grid", "give bootstrap.eval (points from a data source) or "
                   "bootstrap.eval_grid (a grid along one feature), not both")
    eval_sec = sec.section("eval")
    base = sec.ctx.output or sec.ctx.base_dir
    return BootstrapConfig(
        n_bootstraps=sec.value("n_bootstraps", _integer(gt=0), 200),
        confidence_level=sec.value("confidence_level", _number(gt=0, lt=1), 0.9),
        method=sec.value("method", _choice(get_args(BootstrapMethod)), "multinomial"),
        eval=SourceConfig(**_parse_source(eval_sec, y_default=None, needs_y=False))
        if eval_sec else None,
        eval_grid=None if sec.is_set("eval") else _parse_grid(sec.optional_section("eval_grid"),
                                                              data),
        store=sec.value("store", _location(base), _resolve("bootstrap.zarr", base)),
        plot=sec.value("plot", _boolean, False),
    )


def _parse_grid(sec: _Section, data: DataConfig) -> EvalGridConfig:
    """Parse ``bootstrap.eval_grid`` and check the feature exists in synthetic data."""
    grid = EvalGridConfig(
        n_points=sec.value("n_points", _integer(gt=0), 200),
        feature=sec.value("feature", _integer(ge=0), 0),
    )
    if data.make is not None and not sec.ctx.problems and grid.feature >= data.make.n_features:
        sec.report("feature", f"expected a column index < {data.make.n_features} "
                   f"(data.make.n_features), found {grid.feature}")
    return grid


# --------------------------------------------------------------------------------------------
# Outputs must not overwrite inputs
# --------------------------------------------------------------------------------------------


def _comparable(location: str) -> tuple[str, str, str]:
    """Return (kind, normalised location, separator) for comparing two locations."""
    if location.startswith("file://"):
        return "local", os.path.realpath(location[len("file://"):]), os.sep
    if _URL.match(location):
        return "url", location.rstrip("/"), "/"
    return "local", os.path.realpath(location), os.sep


def _relation(a: str, b: str) -> str | None:
    """Say how location ``a`` relates to ``b``: same, contains, inside, or None."""
    kind_a, norm_a, sep = _comparable(a)
    kind_b, norm_b, _ = _comparable(b)
    if kind_a != kind_b:
        return None
    if norm_a == norm_b:
        return "is the same path as"
    if norm_b.startswith(norm_a.rstrip(sep) + sep):
        return "contains"
    if norm_a.startswith(norm_b.rstrip(sep) + sep):
        return "is inside"
    return None


def path_relation(a: str, b: str) -> str | None:
    """Say how location ``a`` relates to location ``b``.

    Parameters
    ----------
    a, b : str
        Local paths (symlinks resolved) or URLs (compared as text).

    Returns
    -------
    {"is the same path as", "contains", "is inside"} or None
        None when neither holds the other (or one is a URL and the other a local path).
    """
    return _relation(a, b)


def _check_overlaps(job: JobConfig, ctx: _Context) -> None:
    """Report outputs that would overwrite an input, the output folder or each other."""
    inputs, outputs = job.inputs(), job.outputs()
    for out_key, out_path in outputs.items():
        for in_key, in_path in inputs.items():
            relation = _relation(out_path, in_path)
            if relation:
                ctx.report(out_key, f"this output would overwrite an input: {out_key} {out_path} "
                           f"{relation} {in_key} {in_path}; choose an output path apart from "
                           "the input data")
    inner = [(key, path) for key, path in outputs.items() if key != "output"]
    for key, path in inner:
        if _relation(path, job.output) in ("is the same path as", "contains"):
            ctx.report(key, f"{key} {path} must be a path inside (or apart from) the output "
                       f"folder {job.output}, not the folder itself or one containing it")
    if len(inner) == 2 and _relation(inner[0][1], inner[1][1]):
        ctx.report(inner[1][0], f"{inner[1][0]} {inner[1][1]} overlaps {inner[0][0]} "
                   f"{inner[0][1]}; give them separate paths")
