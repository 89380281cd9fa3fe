"""Parsing each section of a job file into its dataclass, and the rules that relate fields
(evaluation points and features; the ``model`` section's are in :mod:`.model`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, get_args

from bigkernel.data.synthetic import DEFAULT_NOISE
from bigkernel.data.tables import is_table
from bigkernel.jobs.config.fields import (
    _address,
    _bool_or_auto,
    _boolean,
    _choice,
    _chunk_rows,
    _Context,
    _fail,
    _gpus,
    _integer,
    _Invalid,
    _location,
    _memory_limit,
    _number,
    _resolve,
    _Section,
    _show,
    _text,
    _text_or_list,
)
from bigkernel.jobs.config.model import check_model_task, parse_model
from bigkernel.jobs.config.paths import _check_overlaps
from bigkernel.jobs.config.schema import (
    MAKE_FEATURES,
    BandInterval,
    BootstrapConfig,
    BootstrapMethod,
    ClusterConfig,
    DataConfig,
    EvalGridConfig,
    EvalPoints,
    IntervalsConfig,
    JobConfig,
    LocalClusterConfig,
    LogLevel,
    MakeDataConfig,
    MakeKind,
    Missing,
    PredictConfig,
    SecurityConfig,
    SourceConfig,
    Task,
    TrainSourceConfig,
)

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
    task = top.value("task", _choice(get_args(Task)), "regression")
    model, model_values = parse_model(top.optional_section("model"), data, task)
    job = JobConfig(
        name=top.value("name", _text, default_name),
        output=ctx.output,
        overwrite=top.value("overwrite", _boolean, False),
        seed=ctx.seed,
        data=data,
        model=model,
        predict=_parse_predict(top.section("predict")),
        cluster=_parse_cluster(top.optional_section("cluster")),
        bootstrap=(boot := _parse_bootstrap(top.section("bootstrap"), data)),
        intervals=_parse_intervals(top.section("intervals"), boot),
        progress=top.value("progress", _boolean, True),
        plots=top.value("plots", _bool_or_auto, "auto"),
        log_level=top.value("log_level", _choice(get_args(LogLevel), upper=True), "INFO"),
        task=task,
        source=ctx.source,
        base_dir=ctx.base_dir,
    )
    if not ctx.problems:
        _check_task(top, job, model_values)
    if not ctx.problems:
        _check_overlaps(job, ctx)
    ctx.raise_if_any()
    return job


def _check_task(top: _Section, job: JobConfig, model: dict[str, Any] | None) -> None:
    """What a classification job cannot do (its model keys: :func:`.model.check_model_task`)."""
    if model is not None:
        check_model_task(top.report, model, job.task)
    if job.task != "classification":
        return
    if job.bootstrap is not None:
        top.report(
            "bootstrap",
            "the bootstrap band is for regression: a classifier's labels have no band (remove the "
            "bootstrap section, or fit the ±1 targets as a regression)",
        )
    y = job.data.train.y if job.data.train is not None else "y"
    if isinstance(y, tuple) and len(y) != 1:
        top.report("task", f"a classification job needs one label column as data.train.y, found {list(y)}")


def _parse_source(
    sec: _Section, *, y_default: str | None, needs_y: bool, x_default: str | None = "X"
) -> dict[str, Any]:
    """Parse the fields of a data source (path, x, y, y_path) into keyword arguments; ``x``
    None (predict, eval): the model's columns, resolved when the data is opened."""
    path = sec.required("path", _location(sec.ctx.base_dir), "a zarr group, a .npy file or a sparse .npz file")
    x = sec.value("x", _text_or_list, x_default, nullable=x_default is None)
    y = sec.value("y", _text_or_list, y_default, nullable=True)
    y_path = sec.value("y_path", _location(sec.ctx.base_dir), None, nullable=True)
    is_npy = path.lower().endswith((".npy", ".npz"))  # files of X alone (.npz: sparse CSR)
    if y_path is not None and path and not is_npy:
        sec.report(
            "y_path",
            "y_path is only for a .npy path (or a sparse .npz); name y's array inside the zarr group with `y:` instead",
        )
    elif needs_y and is_npy and y_path is None:
        sec.report("path", f"a {path[-4:]} file holds X only: give the .npy file of y as `y_path:`")
    elif needs_y and not is_npy and y is None:
        sec.report("y", "training data needs targets: give the name of the y array (default 'y')")
    return {"path": path, "x": x, "y": y, "y_path": y_path}


def _parse_train(sec: _Section) -> TrainSourceConfig:
    """Parse ``data.train``: a source with targets, plus ``missing`` and ``categorical``."""
    source = _parse_source(sec, y_default="y", needs_y=True)
    if sec.clean and is_table(source["path"]) and not sec.is_set("x"):
        # no default: "every column but y" would make an id or a leaking column a feature unasked
        sec.report(
            "x",
            f"missing: a Parquet/CSV table needs its feature columns named, e.g. x: [carat, cut, depth] "
            f"beside y: {source['y']!r} (the default, the array 'X', is for zarr groups)",
        )
    missing = sec.value("missing", _choice(get_args(Missing)), "error")
    categorical = sec.value("categorical", _categorical, "auto", nullable=True)
    if sec.clean and (missing != "error" or isinstance(categorical, tuple)) and not is_table(source["path"]):
        key = "missing" if missing != "error" else "categorical"
        sec.report(key, f"{key}: is for a table (Parquet or CSV) source; {source['path']} is an array store")
    return TrainSourceConfig(**source, missing=missing, categorical=categorical)


def _categorical(value: Any) -> tuple[str, ...] | str:
    """``auto`` or a list of column names."""
    if value == "auto":
        return "auto"
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        _fail("'auto', null or a list of column names, e.g. [city]", value)
    return tuple(_text(v) for v in value)


def _parse_make(sec: _Section) -> MakeDataConfig:
    """Parse ``data.make`` and check the feature count fits the generator."""
    kind = sec.value("kind", _choice(get_args(MakeKind)), "friedman1")
    low, high, default_features = MAKE_FEATURES[kind]
    seed = sec.value("seed", _integer(ge=0), None, nullable=True)
    make = MakeDataConfig(
        kind=kind,
        n_samples=sec.value("n_samples", _integer(gt=0), 200_000),
        n_features=sec.value("n_features", _integer(gt=0), default_features),
        noise=sec.value("noise", _number(ge=0), DEFAULT_NOISE[kind]),
        seed=sec.ctx.seed if seed is None else seed,
        chunk_rows=sec.value("chunk_rows", _integer(gt=0), 131_072),
        path=sec.required(
            "path",
            _location(sec.ctx.base_dir),
            "the zarr group or table to write, e.g. data/synthetic.zarr or data/synthetic.csv",
        ),
    )
    too_few, too_many = make.n_features < low, high is not None and make.n_features > high
    if sec.clean and (too_few or too_many):
        allowed = f"exactly {low}" if high == low else f">= {low}"
        sec.report("n_features", f"kind {kind!r} needs n_features {allowed}, found {make.n_features}")
    return make


def _parse_data(top: _Section) -> DataConfig:
    """Parse ``data``: exactly one of ``train`` and ``make``, plus chunking and holdout."""
    if not top.is_set("data"):
        top.report("data", "missing: give data.train (existing data) or data.make (synthetic)")
    sec = top.section("data")
    if sec is None:
        return DataConfig()
    if sec.is_set("train") == sec.is_set("make"):
        sec.report(None, "give exactly one of data.train (existing data) and data.make (synthetic data)")
    train_sec, make_sec = sec.section("train"), sec.section("make")
    return DataConfig(
        train=_parse_train(train_sec) if train_sec else None,
        make=_parse_make(make_sec) if make_sec else None,
        holdout_fraction=sec.value("holdout_fraction", _number(ge=0, lt=1), 0.2),
        chunk_rows=sec.value("chunk_rows", _chunk_rows, "auto"),
    )


def _parse_predict(sec: _Section | None) -> PredictConfig | None:
    """Parse ``predict``; its output is resolved inside the job's output folder."""
    if sec is None:
        return None
    source = _parse_source(sec, y_default=None, needs_y=False, x_default=None)
    base = sec.ctx.output or sec.ctx.base_dir
    output = sec.value("output", _location(base), _resolve("predictions.zarr", base))
    row_id = sec.value("id", _text, None, nullable=True)
    if row_id is not None and source["path"].lower().endswith((".npy", ".npz")):
        sec.report("id", "id: names a column of a table or an array of a zarr group; a .npy/.npz file holds X only")
    return PredictConfig(**source, output=output, id=row_id)


def _parse_cluster(sec: _Section) -> ClusterConfig:
    """Parse ``cluster``: a scheduler address or a LocalCluster, not both."""
    address = sec.value("address", _address, None, nullable=True)
    if address is not None and sec.is_set("local"):
        sec.report(
            "local",
            "cluster.address and cluster.local are exclusive: connect to the "
            "scheduler at address, or start a local cluster — remove one",
        )
    security_sec = sec.section("security")
    if security_sec is not None and address is None:
        sec.report(
            "security",
            "TLS settings are for a scheduler at cluster.address; the local cluster is bound to this machine",
        )
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
        gpus=sec.value("gpus", _gpus, None, nullable=True),
    )


def _parse_bootstrap(sec: _Section | None, data: DataConfig) -> BootstrapConfig | None:
    """Parse ``bootstrap``: evaluation points from ``eval`` or ``eval_grid``, not both."""
    if sec is None:
        return None
    if sec.is_set("eval") and sec.is_set("eval_grid"):
        sec.report(
            "eval_grid",
            "give bootstrap.eval (points from a data source) or "
            "bootstrap.eval_grid (a grid along one feature), not both",
        )
    base = sec.ctx.output or sec.ctx.base_dir
    return BootstrapConfig(
        n_bootstraps=sec.value("n_bootstraps", _integer(gt=0), 200),
        confidence_level=sec.value("confidence_level", _number(gt=0, lt=1), 0.9),
        method=sec.value("method", _choice(get_args(BootstrapMethod)), "multinomial"),
        interval=sec.value("interval", _choice(get_args(BandInterval)), "confidence"),
        eval=_parse_eval(sec, data),
        eval_grid=None if sec.is_set("eval") else _parse_grid(sec.optional_section("eval_grid"), data),
        store=sec.value("store", _location(base), _resolve("bootstrap.zarr", base)),
        plot=sec.value("plot", _boolean, False),
    )


def _parse_intervals(sec: _Section | None, bootstrap: BootstrapConfig | None) -> IntervalsConfig | None:
    """Parse ``intervals``: the posterior band needs the bootstrap's evaluation points."""
    if sec is None:
        return None
    out = IntervalsConfig(
        posterior=sec.value("posterior", _boolean, True),
        level=sec.value("level", _number(gt=0, lt=1), None, nullable=True),
    )
    if bootstrap is None and out.posterior:
        sec.report(
            "posterior",
            "the posterior band is drawn beside the bootstrap band, at its evaluation points: add a "
            "bootstrap section (e.g. bootstrap: {n_bootstraps: 50, plot: true})",
        )
    return out


_EVAL_FORMS = (
    "a list of points such as [[0.1, 2.0], [0.5, 1.0]] (one value per feature; "
    "[0.1, 0.5, 2.0] for data of one feature), or a data source {path: ...}"
)


def _parse_eval(sec: _Section, data: DataConfig) -> SourceConfig | EvalPoints | None:
    """Parse ``bootstrap.eval``: a data source (mapping) or inline points (list)."""
    raw = sec.raw.get("eval")
    if raw is None:
        return None
    if isinstance(raw, list):
        points = sec.value("eval", _eval_points, None)
        problem = (
            eval_points_problem(points, data.make.n_features, "data.make.n_features")
            if points is not None and data.make is not None
            else None
        )
        if problem:
            sec.report("eval", problem)
        return points
    if not isinstance(raw, Mapping):
        hint = f"; write `eval: {{path: {raw}}}` for a data source" if isinstance(raw, str) else ""
        sec.report("eval", f"expected {_EVAL_FORMS}, found {_show(raw)}{hint}")
        return None
    eval_sec = sec.section("eval")
    return SourceConfig(**_parse_source(eval_sec, y_default=None, needs_y=False, x_default=None))


def _eval_points(value: Any) -> EvalPoints:
    """Check inline evaluation points: a non-empty list of equal-length lists of finite numbers,
    or a flat list of numbers (points of one feature)."""
    if not value:
        _fail(_EVAL_FORMS, value, "; the list is empty")
    nested = [isinstance(item, list) for item in value]
    if any(nested) and not all(nested):
        i = nested.index(False) if nested[0] else nested.index(True)
        raise _Invalid(
            f"point {i} is {_show(value[i])} but point 0 is {_show(value[0])}: write every "
            "point as a list of feature values ([[0.1], [0.5]]), or every point as one number "
            "for data of one feature ([0.1, 0.5])"
        )
    rows = value if nested[0] else [[item] for item in value]
    number = _number(expected="a number")
    width = len(rows[0])
    points = []
    for i, row in enumerate(rows):
        if not row:
            raise _Invalid(f"point {i} is an empty list: give one value per feature")
        if len(row) != width:
            raise _Invalid(
                f"point {i} has {len(row)} value(s) ({_show(row)}) but point 0 has {width}: every "
                "point needs one value per feature of the training data"
            )
        values = []
        for j, item in enumerate(row):
            try:
                values.append(number(item))
            except _Invalid as exc:
                where = f"point {i}, feature {j}" if nested[0] else f"point {i}"
                raise _Invalid(f"{where}: {exc}") from None
        points.append(tuple(values))
    return tuple(points)


def eval_points_problem(points: EvalPoints, n_features: int, data_name: str) -> str | None:
    """Say why inline ``bootstrap.eval`` points do not fit the training data, or None.

    Parameters
    ----------
    points : tuple of tuple of float
        ``BootstrapConfig.eval`` given inline.
    n_features : int
        Columns of the training data.
    data_name : str
        How to name the training data in the message (a dotted key or a path).

    Returns
    -------
    str or None
        The problem, saying what was expected, what was found and how to fix it.
    """
    width = len(points[0])
    if width == n_features:
        return None
    if width == 1 and n_features > 1:
        fix = (
            f"a flat list [a, b, ...] means points of one feature; write each point as a list "
            f"of {n_features} values, e.g. [[{', '.join(['0.0'] * n_features)}]]"
        )
    else:
        fix = f"give each point {n_features} values, one per column of the training data"
    return (
        f"expected points of {n_features} features like the training data ({data_name}), found points of {width}: {fix}"
    )


def _column(value: Any) -> int | str:
    """Check for a column index >= 0 or a column name."""
    if isinstance(value, str):
        return _text(value)
    try:
        return _integer(ge=0)(value)
    except _Invalid:
        _fail("a column index >= 0 or a column name", value)


def _parse_grid(sec: _Section, data: DataConfig) -> EvalGridConfig:
    """Parse ``bootstrap.eval_grid`` and check the feature exists in synthetic data."""
    grid = EvalGridConfig(
        n_points=sec.value("n_points", _integer(gt=0), 200),
        feature=sec.value("feature", _column, 0),
    )
    if isinstance(grid.feature, str) and data.make is not None and not sec.ctx.problems:
        names = data.make.source.x
        if not isinstance(names, tuple) or grid.feature not in names:
            where = f"the columns of data.make are {list(names)}" if isinstance(names, tuple) else (
                "data.make writes a zarr group, whose X has no column names")  # fmt: skip
            sec.report("feature", f"no column {grid.feature!r}: {where}; or give a column index")
    elif data.make is not None and not sec.ctx.problems and grid.feature >= data.make.n_features:
        sec.report(
            "feature", f"expected a column index < {data.make.n_features} (data.make.n_features), found {grid.feature}"
        )
    return grid
