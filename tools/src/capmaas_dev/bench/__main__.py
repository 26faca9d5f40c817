"""`python -m capmaas_dev.bench`."""

from capmaas_dev.bench.run import main

raise SystemExit(main())
