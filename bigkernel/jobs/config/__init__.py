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

from bigkernel.jobs.config.loader import config_from_dict, load_config
from bigkernel.jobs.config.paths import path_relation
from bigkernel.jobs.config.rules import eval_points_problem
from bigkernel.jobs.config.schema import (  # the dataclasses, and the vocabularies of their fields
    JOB_KERNELS,
    BootstrapConfig,
    ClusterConfig,
    DataConfig,
    DType,
    EvalGridConfig,
    Form,
    GramDType,
    JobConfig,
    Landmarks,
    LocalClusterConfig,
    MakeDataConfig,
    ModelConfig,
    Preconditioner,
    PredictConfig,
    Sampler,
    SecurityConfig,
    Solver,
    SourceConfig,
    TrainSourceConfig,
)

__all__ = [
    "JOB_KERNELS",
    "DType",
    "Form",
    "GramDType",
    "Landmarks",
    "Preconditioner",
    "Sampler",
    "Solver",
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
    "TrainSourceConfig",
    "config_from_dict",
    "eval_points_problem",
    "load_config",
    "path_relation",
]
