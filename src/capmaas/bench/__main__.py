"""`python -m capmaas.bench`."""

from capmaas.bench.run import main

raise SystemExit(main())
