"""A job's inputs: opening its data sources and checking them from metadata, before any
cluster starts or any pass runs."""

from __future__ import annotations

from typing import Any

from bigkernel.data.columns import default_x, feature_index
from bigkernel.data.sources import Dataset, open_source
from bigkernel.data.synthetic import SyntheticSpec, make_data
from bigkernel.errors import DataError
from bigkernel.jobs.config import JobConfig, SourceConfig, eval_points_problem


def _chunk_rows(cfg: JobConfig) -> int | None:
    return None if cfg.data.chunk_rows == "auto" else int(cfg.data.chunk_rows)


def open_training_data(cfg: JobConfig) -> Dataset:
    """Open ``data.train``, or make ``data.make`` first (reused when already complete)."""
    if cfg.data.make is not None:
        mk = cfg.data.make
        spec = SyntheticSpec(mk.kind, mk.n_samples, mk.n_features, mk.noise, mk.seed)
        make_data(spec, mk.path, chunk_rows=mk.chunk_rows)
    return open_dataset(cfg.data.train_source, _chunk_rows(cfg), labels=cfg.task == "classification")


def open_dataset(
    src: SourceConfig,
    chunk_rows: int | None,
    with_y: bool = True,
    labels: bool = False,
    *,
    columns: tuple[str, ...] | None = None,
    where: str = "x",
    row_id: str | None = None,
    encoder: Any = None,
) -> Dataset:
    """Open a ``SourceConfig`` (train, predict or eval data); ``labels``: y holds class labels.

    ``x`` not given (None: predict, eval) means the model's ``columns`` (the training data's
    names; with an ``encoder``, the raw columns it reads) for a table or a zarr group of column
    arrays, else the array ``"X"``; ``where`` names the key in messages. ``row_id``: a column
    (or 1-D array) read beside X as the data set's ``ids``. ``encoder``: the training data's
    table encoder (categories, fill values), applied to prediction and evaluation data.
    """
    raw = columns if encoder is None else tuple(str(c) for c in encoder.feature_names_in_)
    x = default_x(src.path, src.x, raw, f"{where}: [a, b, c]")
    y = (list(src.y) if isinstance(src.y, tuple) else src.y) if with_y else None
    if labels and isinstance(y, list) and len(y) == 1:
        y = y[0]  # one label column: 1-D labels
    return open_source(
        src.path, x, y, y_path=src.y_path if with_y else None, chunk_rows=chunk_rows, labels=labels, row_id=row_id,
        missing=getattr(src, "missing", "error"), categorical=getattr(src, "categorical", None), encoder=encoder,
    )  # fmt: skip


def open_predict_data(cfg: JobConfig, columns: tuple[str, ...] | None, encoder: Any = None) -> Dataset:
    """The ``predict:`` data, its X columns by name (default: the model's ``columns``), encoded
    by the training data's ``encoder`` if any, with the ``id`` column as ``ids`` when asked for;
    checked against the training columns.

    Raises
    ------
    DataNotFoundError, DataError
    """
    pds = open_dataset(
        cfg.predict, _chunk_rows(cfg), with_y=False, columns=columns, where="predict.x", row_id=cfg.predict.id,
        encoder=encoder,
    )  # fmt: skip
    _check_columns("predict.x", pds.columns, columns, cfg)
    return pds


def open_eval_data(cfg: Any, columns: tuple[str, ...] | None, encoder: Any = None) -> Dataset:
    """The ``bootstrap.eval`` data source, its X columns by name (default: the model's),
    encoded by the training data's ``encoder`` if any."""
    eds = open_dataset(
        cfg.bootstrap.eval, None, with_y=False, columns=columns, where="bootstrap.eval.x", encoder=encoder
    )
    _check_columns("bootstrap.eval.x", eds.columns, columns, cfg)
    return eds


def _check_columns(key: str, found: tuple[str, ...] | None, columns: tuple[str, ...] | None, cfg: Any) -> None:
    """Named columns must be the training columns in their order (as scikit-learn checks a
    DataFrame's): a list in another order would be a silent mis-assignment by position."""
    if columns is not None and found is not None and tuple(found) != tuple(columns):
        train = cfg.data.train.path if cfg.data.train is not None else cfg.data.make.path
        raise DataError(
            f"{key} names columns {list(found)}, but the model is fitted on {list(columns)} of "
            f"{train}: names and order must match the fit (as scikit-learn checks a DataFrame's); "
            f"leave {key} out to use the model's columns"
        )


def check_inputs(cfg: JobConfig) -> None:
    """Check every existing input from metadata, before any cluster starts or any pass runs.

    Missing or malformed training and prediction data, and prediction data whose feature count
    differs from the training data's, fail here rather than after a long fit.

    Raises
    ------
    DataNotFoundError, DataError
    """
    encoder = None
    if cfg.data.train is not None:
        tds = open_training_data(cfg)
        n_features, columns, train, encoder = tds.X.shape[1], tds.columns, cfg.data.train.path, tds.encoder
    else:
        mk = cfg.data.make
        n_features, columns, train = mk.n_features, _column_names(mk.source.x), mk.path
    if cfg.bootstrap is not None:
        check_eval_features(cfg, n_features, train, columns, encoder)
    if cfg.predict is None:
        return
    if cfg.data.make is not None and cfg.predict.path == train:
        # predictions of the data this job makes (perhaps not yet): its columns by construction
        _check_columns("predict.x", _column_names(cfg.predict.x), columns, cfg)
        return
    d = open_predict_data(cfg, columns, encoder).X.shape[1]
    if d != n_features:
        raise DataError(
            f"predict.path {cfg.predict.path} has {d} features, but the training data "
            f"{train} has {n_features}: a model predicts data with the columns it was "
            "fitted on; give prediction data with the same features"
        )


def _column_names(x) -> tuple[str, ...] | None:
    """A source's ``x`` as column names (a table's list), or None (an array's name)."""
    return x if isinstance(x, tuple) else None


def check_eval_features(
    cfg: Any, n_features: int, train: str, columns: tuple[str, ...] | None = None, encoder: Any = None
) -> None:
    """Before the fit: the evaluation points must have the training data's features.

    Inline points (``bootstrap.eval: [[...], ...]``) are checked from the config, a data source
    from its metadata (its columns by name when the training data has names); the grid's
    ``feature`` must be a column of the training data (an index, or a name).

    Parameters
    ----------
    cfg : JobConfig
    n_features : int
        Columns of the training data.
    train : str
        Where the training data is (named in the message).
    columns : tuple of str, optional
        The training data's column names.
    encoder : TableEncoder, optional
        The training data's table encoder (evaluation tables are encoded as it does).

    Raises
    ------
    DataError, ParameterError
    """
    bc = cfg.bootstrap
    if bc is None:
        return
    if bc.eval_grid is not None:
        feature_index(bc.eval_grid.feature, columns, n_features, "bootstrap.eval_grid.feature")
    if bc.eval is None:
        return
    if isinstance(bc.eval, SourceConfig):
        d = open_eval_data(cfg, columns, encoder).X.shape[1]
        if d != n_features:
            raise DataError(
                f"bootstrap.eval.path {bc.eval.path} has {d} features, but the training data "
                f"{train} has {n_features}: the band is evaluated at points with the columns "
                "the model was fitted on; give evaluation data with the same features"
            )
        return
    problem = eval_points_problem(bc.eval, n_features, train)
    if problem:
        raise DataError(f"bootstrap.eval: {problem}")
