"""`python -m capmaas` runs the command-line interface."""

from capmaas.cli import main

raise SystemExit(main())
