"""`python -m glensidec.cosim OUTDIR ...`: what `make -C OUTDIR sim` runs."""

import sys

from glensidec.cosim.runner import main

sys.exit(main())
