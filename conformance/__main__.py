"""`python -m pjrt_ref.conformance PATH...`: the same as `pjrt-ref conformance`."""
import sys

from .runner import main

sys.exit(main())
