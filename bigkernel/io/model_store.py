"""Save and load fitted models as a zarr group plus JSON metadata — never pickle.

Layout: group attrs hold ``format`` ("bigkernel-model"), ``format_version``, ``library_version``,
``estimator`` (class name), ``params`` (get_params, JSON), ``state`` (fitted scalars and the
feature-map description) and, optional, ``input`` (what the training X looked like:
``n_features_in``, ``X_dtype`` and ``feature_names_in`` when it was fitted on named columns, so a
loaded model checks names and order at predict as the fitted one does; stores written before it
load without names); arrays hold the numbers. A model is written into a temporary sibling
folder and renamed into place, and ``complete: true`` is the last attribute written, so a crash
never leaves a store that loads.
"""

from __future__ import annotations

import json
import logging
import os

import numpy as np
import zarr
from sklearn.base import BaseEstimator

from bigkernel._version import __version__
from bigkernel.errors import DataNotFoundError, ModelFormatError
from bigkernel.io.atomic import atomic_folder

logger = logging.getLogger(__name__)

MODEL_FORMAT = "bigkernel-model"
FORMAT_VERSION = 1


_MODELS: dict[str, type] = {}


def register_model(cls: type) -> type:
    """Class decorator: let :func:`load` rebuild ``cls`` from a store naming it.

    Estimators register themselves where they are defined (as zarr registers codecs), so this
    module imports no estimator. The saved name is the class name; registering another class
    under a taken name is refused.
    """
    name = cls.__name__
    known = _MODELS.get(name)
    if known is not None and known is not cls:
        raise ValueError(f"a model class named {name!r} is already registered ({known.__module__})")
    _MODELS[name] = cls
    return cls


def registered_models() -> dict[str, type]:
    """The registered estimator classes by saved name (a copy)."""
    return dict(_MODELS)


def _jsonable(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if callable(getattr(value, "to_dict", None)):  # a Kernel parameter: its JSON description
        return _jsonable(value.to_dict())
    return value


def save_model(estimator, path: str, *, overwrite: bool = False) -> str:
    """Write ``estimator`` (fitted) to a zarr group at ``path``; returns ``path``."""
    attrs, arrays = estimator.get_model_state()
    # verbose is how fit/predict report progress, not the model: left out, so the store reads the
    # same as before the parameter existed (a load gets the default, 0)
    params = {k: v for k, v in estimator.get_params(deep=False).items() if k != "verbose"}
    if not isinstance(params.get("random_state"), (int, type(None))):
        params["random_state"] = None  # a RandomState object is not data; the seed is in the state
    meta = {
        "format": MODEL_FORMAT,
        "format_version": FORMAT_VERSION,
        "library_version": __version__,
        "estimator": type(estimator).__name__,
        "params": _jsonable(params),
        "state": _jsonable(attrs),
        "input": _input_facts(estimator),
    }
    json.dumps(meta)  # fail here, before writing anything, if something is not JSON
    with atomic_folder(str(path), overwrite=overwrite, what="model") as target:
        group = zarr.open_group(target, mode="w")
        for name, arr in arrays.items():
            arr = np.ascontiguousarray(arr)
            group.create_array(name, shape=arr.shape, dtype=arr.dtype, chunks=arr.shape or None)[...] = arr
        group.attrs.update(meta)
        group.attrs["complete"] = True  # last: a store without it is unfinished
    logger.info("saved %s to %s", type(estimator).__name__, path)
    return path


def load(path: str) -> BaseEstimator:
    """Load a model saved by ``model.save(path)``.

    Only JSON metadata and numeric arrays are read; nothing in the store is executed. Anything
    that is not a complete bigkernel model store raises :class:`ModelFormatError`.

    A model fitted by a job on a table with categorical columns or ``missing: impute`` comes
    back as a scikit-learn ``Pipeline([("encode", TableEncoder), ("model", estimator)])``, so
    ``load(path).predict(df)`` takes the table's raw columns (pandas), as the job's
    ``predict:`` and ``bigkernel predict`` do; ``pipeline[-1]`` is the estimator.

    Parameters
    ----------
    path : str
        The model's zarr group (local path or fsspec URL).

    Returns
    -------
    estimator or Pipeline
        A fitted estimator of the saved class (a bigkernel estimator, hence a scikit-learn
        ``BaseEstimator``), with the saved parameters; or the Pipeline above.

    Raises
    ------
    DataNotFoundError
        Nothing at ``path``.
    ModelFormatError
        ``path`` is not a complete bigkernel model, or was written by a newer format version.
    """
    est = load_estimator(path)
    encoder = getattr(est, "table_encoder_", None)
    if encoder is None:
        return est
    from sklearn.pipeline import Pipeline

    return Pipeline([("encode", encoder), ("model", est)])


def load_estimator(path: str) -> BaseEstimator:
    """:func:`load` without the Pipeline: the estimator, its table encoder (if any) as
    ``table_encoder_`` (for tools that encode the data themselves: ``bigkernel predict``,
    ``bigkernel update``)."""
    path = str(path)
    local = "://" not in path
    if local and not os.path.exists(path):
        raise DataNotFoundError(f"no model at {path!r}; save one with model.save(path)")
    if local and not os.path.isdir(path):
        raise ModelFormatError(
            f"{path!r} is a file, not a bigkernel model: models are zarr folders written by "
            "model.save(); pickles and other files are never loaded"
        )
    try:
        group = zarr.open_group(path, mode="r")
        meta = group.attrs.asdict()
    except Exception as exc:
        raise ModelFormatError(f"{path!r} is not a bigkernel model (no readable zarr metadata: {exc})") from None
    if meta.get("format") != MODEL_FORMAT:
        raise ModelFormatError(
            f"{path!r} is not a bigkernel model: expected format {MODEL_FORMAT!r}, found {meta.get('format')!r}"
        )
    if int(meta.get("format_version", -1)) > FORMAT_VERSION:
        raise ModelFormatError(
            f"{path!r} was written in model format {meta['format_version']} by bigkernel "
            f"{meta.get('library_version')}; this bigkernel ({__version__}) reads up to "
            f"{FORMAT_VERSION}: upgrade bigkernel"
        )
    if not meta.get("complete"):
        raise ModelFormatError(
            f"{path!r} is an unfinished model store (its writer did not complete); save the model again"
        )
    cls = _MODELS.get(meta.get("estimator"))
    if cls is None:
        raise ModelFormatError(f"{path!r} holds an unknown estimator {meta.get('estimator')!r}")
    try:
        arrays = {name: np.asarray(arr[...]) for name, arr in group.arrays()}
        est = cls(**meta["params"])
        est.set_model_state(meta["state"], arrays)
        _restore_input_facts(est, meta.get("input"))
    except (KeyError, ValueError, TypeError, OSError) as exc:
        raise ModelFormatError(
            f"{path!r} is a damaged or truncated bigkernel model: {type(exc).__name__}: {exc}"
        ) from None
    return est


def _input_facts(estimator) -> dict:
    """What the training X looked like, for every estimator kind alike (``input`` metadata)."""
    facts = {"n_features_in": int(estimator.n_features_in_)}
    if getattr(estimator, "X_dtype_in_", None) is not None:
        facts["X_dtype"] = estimator.X_dtype_in_
    names = getattr(estimator, "feature_names_in_", None)
    if names is not None:
        facts["feature_names_in"] = [str(n) for n in names]
    if getattr(estimator, "target_names_in_", None):
        facts["target_names"] = list(estimator.target_names_in_)
    encoder = getattr(estimator, "table_encoder_", None)
    # categories and fill values of a table's columns, as JSON; not an encoder left over from
    # before a refit on other columns
    if (
        encoder is not None
        and names is not None
        and list(encoder.get_feature_names_out()) == list(facts["feature_names_in"])
    ):
        facts["encoder"] = encoder.to_dict()
    return facts


def _restore_input_facts(estimator, facts: dict | None) -> None:
    """Set ``feature_names_in_`` (and the training dtype) back; absent in format-1 stores
    written before the field existed, which then load without names."""
    if facts is None:
        return
    d = int(facts["n_features_in"])
    if d != estimator.n_features_in_:
        raise ValueError(f"input.n_features_in is {d} but the fitted state has {estimator.n_features_in_} features")
    names = facts.get("feature_names_in")
    if names is not None and len(names) != d:
        raise ValueError(f"input.feature_names_in has {len(names)} names for {d} features")
    estimator.set_input_facts(facts.get("X_dtype", "float64"), names, facts.get("target_names"))
    if facts.get("encoder") is not None:
        from bigkernel.data.encode import TableEncoder

        encoder = TableEncoder.from_dict(facts["encoder"])
        if names is not None and list(encoder.get_feature_names_out()) != list(names):
            raise ValueError("input.encoder's output columns differ from input.feature_names_in")
        estimator.table_encoder_ = encoder
