"""The job configuration's schema: frozen dataclasses, one per YAML section, and the
vocabularies of their fields (read by the parsers in :mod:`.rules`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, Literal

import yaml

from bigkernel.data.synthetic import table_columns
from bigkernel.data.tables import is_table
from bigkernel.errors import ConfigError
from bigkernel.jobs.config.estimators import JOB_KERNELS, model_keys, solver_of  # noqa: F401 (JOB_KERNELS: re-exported)

Solver = Literal["random_features", "exact", "nystroem", "cg", "auto"]
#: a kernel of the registry (bigkernel/kernels/registry.py) usable on its own: JOB_KERNELS
Kernel = str
#: the registry paths a solver needs to serve its kernel (auto picks exact or nystroem, and
#: random features only for kernels with a sampler)
SOLVER_PATHS = {
    "random_features": ("random_features",),
    "exact": ("exact",),
    "nystroem": ("nystroem",),
    "cg": ("nystroem",),
    "auto": ("exact", "nystroem"),
}
Preconditioner = Literal["rpcholesky", "nystroem", "none"]
GramDType = Literal["auto", "float32", "float64"]
Landmarks = Literal["rpcholesky", "uniform"]
Sampler = Literal["iid", "orthogonal"]
Form = Literal["cos", "cossin"]
DType = Literal["auto", "float32", "float64"]
MakeKind = Literal["friedman1", "sine", "classes"]
#: what a job fits: a regressor (numeric targets) or a classifier (class labels)
Task = Literal["regression", "classification"]
BootstrapMethod = Literal["multinomial", "poisson"]
BandInterval = Literal["confidence", "prediction"]
#: Inline evaluation points (``bootstrap.eval: [[0.1, 2.0], [0.5, 1.0]]``): one tuple per point.
EvalPoints = tuple[tuple[float, ...], ...]
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
Missing = Literal["error", "drop", "impute"]

#: Features a synthetic generator needs (minimum, maximum or None) and uses by default.
MAKE_FEATURES = {"friedman1": (5, None, 10), "sine": (1, 1, 1), "classes": (5, None, 10)}
EXAMPLE_CONFIG = "configs/quickstart.yaml"


# --------------------------------------------------------------------------------------------
# Schema
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class SourceConfig:
    """A data source: a zarr group (local path or fsspec URL), a ``.npy`` file for X, a
    ``.npz`` file of sparse CSR X (``scipy.sparse.save_npz``), or a Parquet / CSV table (file,
    glob, or folder of Parquet parts).

    Parameters
    ----------
    path : str
        Resolved location of the zarr group, the ``.npy``/``.npz`` file holding X, or the table.
    x : str, tuple of str or None, default="X"
        Name of the X array inside the group (ignored for ``.npy``); for a table, or a zarr
        group holding one 1-D array per column, the list of feature columns (taken by name,
        in the order listed). None (the default of ``predict`` and ``bootstrap.eval``): the
        fitted model's columns for a table or a zarr group of column arrays, else ``"X"``.
    y : str, tuple of str or None, default="y"
        Name of the y array inside the group, or the target column(s) of a table; None when the
        source has no targets.
    y_path : str or None, default=None
        Resolved location of y's ``.npy`` file, for ``.npy``/``.npz`` sources only.
    """

    path: str
    x: str | tuple[str, ...] | None = "X"
    y: str | tuple[str, ...] | None = "y"
    y_path: str | None = None

    @property
    def is_npy(self) -> bool:
        """bool : Whether X is read from a ``.npy`` (or sparse ``.npz``) file of X alone."""
        return self.path.lower().endswith((".npy", ".npz"))


@dataclass(frozen=True, kw_only=True)
class TrainSourceConfig(SourceConfig):
    """The training data source (``data.train``): a :class:`SourceConfig` plus what a table's
    missing values and string columns become.

    Parameters
    ----------
    path, x, y, y_path
        As in :class:`SourceConfig`.
    missing : {"error", "drop", "impute"}, default="error"
        A missing (NaN/empty) value of a table: "error" stops the fit naming every bad row
        range; "drop" drops the rows with a missing x or y (counted in the log and
        metrics.json); "impute" fills x with the training column mean (a categorical column:
        its most frequent category), saved with the model and applied at predict, and drops
        the rows with a missing y (a target is never imputed).
    categorical : tuple of str, "auto" or None, default="auto"
        Table columns to one-hot encode (``city`` → ``city_<category>``; the sorted categories
        are saved with the model and applied at predict, an unseen category is an error);
        "auto": every non-numeric x column (logged); None: none (a string column is an error).
    """

    missing: Missing = "error"
    categorical: tuple[str, ...] | Literal["auto"] | None = "auto"


@dataclass(frozen=True, kw_only=True)
class MakeDataConfig:
    """Synthetic data written (a zarr group or a table) before the fit (``data.make``).

    Parameters
    ----------
    kind : {"friedman1", "sine", "classes"}, default="friedman1"
        Friedman #1 (needs ``n_features >= 5``), the 1-D noisy sine (``n_features == 1``), or
        three classes cut from the noisy Friedman #1 value (``n_features >= 5``; for
        ``task: classification``).
    n_samples : int, default=200_000
        Number of rows, > 0.
    n_features : int, default=10 for friedman1 and classes, 1 for sine
        Number of columns of X.
    noise : float, default=1.0 for friedman1 and classes, 0.3 for sine
        Standard deviation of the Gaussian noise added to y, >= 0; None (as constructed without
        it) means the kind's default, :data:`bigkernel.data.synthetic.DEFAULT_NOISE`.
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
    noise: float | None = None
    seed: int = 0
    chunk_rows: int = 131_072
    path: str

    @property
    def source(self) -> SourceConfig:
        """SourceConfig : The written data as a training source (arrays ``X`` and ``y``, or a
        table's columns ``x0 … x{d-1}`` and ``y``)."""
        if is_table(self.path):
            x, y = table_columns(self.n_features)
            return SourceConfig(path=self.path, x=x, y=y)
        return SourceConfig(path=self.path, x="X", y="y")


@dataclass(frozen=True, kw_only=True)
class DataConfig:
    """Training data (``data``): exactly one of ``train`` and ``make`` is set.

    Parameters
    ----------
    train : TrainSourceConfig or None, default=None
        Existing training data.
    make : MakeDataConfig or None, default=None
        Synthetic training data, written before the fit.
    holdout_fraction : float, default=0.2
        Fraction of rows held out for evaluation, ``0 <= f < 1``; rows are assigned by a seeded
        hash of the row index.
    chunk_rows : int or "auto", default="auto"
        Rows per chunk of the streamed pass.
    """

    train: TrainSourceConfig | None = None
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
    """The estimator (``model``): its class and its parameters, names as in scikit-learn.

    The YAML section is read by :mod:`bigkernel.jobs.config.model`: every parameter of the
    chosen class is a key, checked by the class's ``_parameter_constraints`` and defaulting to
    its signature; the job's own keys (``solver``, ``gamma`` lists and ``"cv"``, ``alpha``
    ``"cv"``/``"loo"``/``"gcv"``/``"evidence"``, ``cv``, ``gram_dtype``, ``preconditioner:
    none``, ``task``) choose the class and translate to its parameters
    (:mod:`bigkernel.jobs.config.estimators`, the one table). The README's model table lists
    the keys, and each estimator's docstring its parameters.

    Parameters
    ----------
    estimator : str, default="RandomFeatureRidge"
        The class's name (one of :func:`bigkernel.jobs.config.estimators.estimators`).
    params : mapping, default={}
        Every ``__init__`` parameter of the class (lists held as tuples); built with
        ``estimator_class(estimator)(**estimator_arguments(params))``.
    """

    estimator: str = "RandomFeatureRidge"
    params: Mapping[str, Any] = field(default_factory=dict)

    @property
    def solver(self) -> str:
        """str : The job's solver: random_features, nystroem, cg, exact or auto."""
        return solver_of(self.estimator, self.params)


@dataclass(frozen=True, kw_only=True)
class PredictConfig(SourceConfig):
    """Data to predict after the fit (``predict``): a source plus where predictions go.

    Parameters
    ----------
    path, x, y, y_path
        As in :class:`SourceConfig`; ``x`` defaults to None (the model's columns) and ``y`` to
        None (targets are optional).
    output : str, default="<output>/predictions.zarr"
        Resolved location of the predictions; relative paths are taken inside the job's
        output folder. The suffix picks the format: ``.csv`` (one file), ``.parquet`` (a folder
        of parts), anything else a zarr group (array ``y_pred``).
    id : str or None, default=None
        A column of the table (or a 1-D array of the zarr group) copied to the output beside
        ``y_pred``, row for row: the output's first column (an array of that name in a zarr
        output). Any dtype, strings included.
    """

    x: str | tuple[str, ...] | None = None
    y: str | None = None
    output: str = "predictions.zarr"
    id: str | None = None


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
    gpus : "all", tuple of int or None, default=None
        Start a dask-cuda ``LocalCUDACluster`` instead: one worker process per GPU (every GPU
        with ``all``, or these ordinals), each seeing its own GPU as ``cuda:0``
        (``n_workers`` does not apply). Needs dask-cuda (``pip install "bigkernel[gpu]"``);
        use it with ``model.device: cuda``.
    """

    n_workers: int = 1
    threads_per_worker: int = 2
    memory_limit: int | str = "auto"
    dashboard: bool = False
    host: str = "127.0.0.1"
    gpus: str | tuple[int, ...] | None = None


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
    feature : int or str, default=0
        Column of X the grid runs along: an index >= 0, or a column name of data with names
        (a table, a zarr group of column arrays).
    """

    n_points: int = 200
    feature: int | str = 0


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
    interval : {"confidence", "prediction"}, default="confidence"
        What the band is: a confidence band for the fitted function f-hat(x), or a prediction
        interval for a new observation y at x.
    eval : SourceConfig, tuple of tuple of float, or None, default=None
        Evaluation points read from a source, or given inline in the YAML as a list of points
        (``[[0.1, 2.0], [0.5, 1.0]]``; ``[0.1, 0.5]`` is two points of one feature), held
        here as one tuple per point.
    eval_grid : EvalGridConfig or None, default=EvalGridConfig()
        Evaluation points on a grid; the default when ``eval`` is not given.
    store : str, default="<output>/bootstrap.zarr"
        Resolved location of the replicate store; relative to the job's output folder.
    plot : bool, default=False
    """

    n_bootstraps: int = 200
    confidence_level: float = 0.9
    method: BootstrapMethod = "multinomial"
    interval: BandInterval = "confidence"
    eval: SourceConfig | EvalPoints | None = None
    eval_grid: EvalGridConfig | None = field(default_factory=EvalGridConfig)
    store: str = "bootstrap.zarr"
    plot: bool = False


@dataclass(frozen=True, kw_only=True)
class IntervalsConfig:
    """Posterior bands beside the bootstrap band (``intervals``; regression jobs with a
    ``bootstrap`` section: its evaluation points, band files and figure).

    The posterior band is ``fitted ± z·std`` with the model's posterior standard deviation of
    f(x) (``predict(X, return_std=True)``: the Gaussian-process reading, σ² by maximum
    evidence); for ``bootstrap.interval: prediction`` the band is for a new y (the noise
    variance ``σ²α`` added). No refits: it costs one prediction.

    Parameters
    ----------
    posterior : bool, default=True
        Draw and write the posterior band.
    level : float or None, default=None
        Coverage of the posterior band, ``0 < c < 1``; None: ``bootstrap.confidence_level``
        (the same as the bootstrap band's, so the two widths compare).
    """

    posterior: bool = True
    level: float | None = None


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
    intervals : IntervalsConfig or None, default=None
    progress : bool, default=True
        Show the progress of each pass: bars on a terminal, else a log line every 10 s with the
        rows done (``bigkernel -q`` turns it off).
    plots : bool or "auto", default="auto"
        Write figures and report.md to the output folder (matplotlib is a dependency); "auto"
        skips them with a warning if matplotlib cannot be imported, true makes that an error.
    log_level : {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}, default="INFO"
        Level of ``job.log`` and of the terminal, unless the CLI's ``-q`` (WARNING) or ``-v``
        (DEBUG) is given.
    task : {"regression", "classification"}, default="regression"
        ``classification``: y holds class labels (ints or strings), the model is the matching
        classifier (least squares on ±1 targets, one-vs-rest) and the job reports accuracy,
        balanced accuracy and the confusion matrix.
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
    intervals: IntervalsConfig | None = None
    progress: bool = True
    plots: bool | Literal["auto"] = "auto"
    log_level: LogLevel = "INFO"
    task: Task = "regression"
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
            (
                "bootstrap.eval",
                self.bootstrap.eval if self.bootstrap and isinstance(self.bootstrap.eval, SourceConfig) else None,
            ),
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
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
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
    "data.train": _keys(TrainSourceConfig),
    "data.make": _keys(MakeDataConfig),
    "model": (),  # the chosen classes' parameters: section_keys() reads them when a job is read
    "predict": _keys(PredictConfig),
    "cluster": _keys(ClusterConfig),
    "cluster.security": _keys(SecurityConfig),
    "cluster.local": _keys(LocalClusterConfig),
    "bootstrap": _keys(BootstrapConfig),
    "bootstrap.eval": _keys(SourceConfig),
    "bootstrap.eval_grid": _keys(EvalGridConfig),
    "intervals": _keys(IntervalsConfig),
}


def section_keys() -> dict[str, tuple[str, ...]]:
    """Return the valid keys of every section, the ``model`` section's read from the estimator
    classes now (:func:`bigkernel.jobs.config.estimators.model_keys`).

    Returns
    -------
    dict of str to tuple of str
        By dotted prefix, as :data:`SECTION_KEYS`.
    """
    return {**SECTION_KEYS, "model": model_keys()}
