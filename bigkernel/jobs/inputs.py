"""A job's inputs: opening its data sources and checking them from metadata, before any
cluster starts or any pass runs."""

from __future__ import annotations

from typing import Any

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
    src: SourceConfig, chunk_rows: int | None, with_y: bool = True, labels: bool = False, encoder: Any = None
) -> Dataset:
    """Open a ``SourceConfig`` (train, predict or eval data); ``labels``: y holds class labels;
    ``encoder``: the training data's table encoder, applied to prediction data."""
    x = list(src.x) if isinstance(src.x, tuple) else src.x
    y = (list(src.y) if isinstance(src.y, tuple) else src.y) if with_y else None
    if labels and isinstance(y, list) and len(y) == 1:
        y = y[0]  # one label column: 1-D labels
    return open_source(
        src.path, x, y, y_path=src.y_path if with_y else None, chunk_rows=chunk_rows, labels=labels,
        missing=getattr(src, "missing", "error"), categorical=getattr(src, "categorical", None), encoder=encoder,
    )  # fmt: skip


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
        check_eval_features(cfg, n_features, train)
    if cfg.predict is None:
        return
    if cfg.data.make is not None and cfg.predict.path == train:
        # predictions of the data this job makes (perhaps not yet): its columns by construction
        d, pcols = n_features, _column_names(cfg.predict.x)
    else:
        pds = open_dataset(cfg.predict, _chunk_rows(cfg), with_y=False, encoder=encoder)
        d, pcols = pds.X.shape[1], pds.columns
    if d != n_features:
        raise DataError(
            f"predict.path {cfg.predict.path} has {d} features, but the training data "
            f"{train} has {n_features}: a model predicts data with the columns it was "
            "fitted on; give prediction data with the same features"
        )
    if columns is not None and pcols is not None and pcols != columns:
        raise DataError(
            f"predict.x names columns {list(pcols)}, but the model is fitted on "
            f"{list(columns)} of {train}: names and order must match the fit (as "
            "scikit-learn checks a DataFrame's); list the same columns in the same order"
        )


def _column_names(x) -> tuple[str, ...] | None:
    """A source's ``x`` as column names (a table's list), or None (an array's name)."""
    return x if isinstance(x, tuple) else None


def check_eval_features(cfg: Any, n_features: int, train: str) -> None:
    """Before the fit: the evaluation points must have the training data's features.

    Inline points (``bootstrap.eval: [[...], ...]``) are checked from the config, a data source
    from its metadata; the grid is made from the training data and always fits.

    Parameters
    ----------
    cfg : JobConfig
    n_features : int
        Columns of the training data.
    train : str
        Where the training data is (named in the message).

    Raises
    ------
    DataError
    """
    bc = cfg.bootstrap
    if bc is None or bc.eval is None:
        return
    if isinstance(bc.eval, SourceConfig):
        d = open_dataset(bc.eval, None, with_y=False).X.shape[1]
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
