"""The `dagster-ir` command line (`main`): its subcommands, the update runs they launch, progress
lines and tables for the terminal, and the Dagster instance it opens. The top layer of `assets`: it
imports `assets.definitions` inside the functions that need it, so that `--help` stays fast and a bad
collections YAML is reported on one line."""
