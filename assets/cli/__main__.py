"""`python -m assets.cli`: the `dagster-ir` command."""

from assets.cli.main import main

raise SystemExit(main())
