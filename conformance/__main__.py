"""`python -m pjrt_ref.conformance PATH...`: the same as `pjrt-ref conformance`."""
import sys

from pjrt_ref.conformance.runner import main

sys.exit(main())
