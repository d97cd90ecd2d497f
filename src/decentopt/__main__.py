"""``python -m decentopt ...`` (also under ``torchrun -m decentopt ...``)."""

from decentopt.cli import main

raise SystemExit(main())
