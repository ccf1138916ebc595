"""Dagster helpers the asset modules share: partitions, resources, the IO manager, metadata, settings,
the asset jobs, staleness, torchrun launches and the few private Dagster names. Imports nothing from
`assets.defs`, `assets.definitions` or `assets.cli.main`."""
