"""On-disk formats: model store, prediction writer, bootstrap band store, atomic folders."""
