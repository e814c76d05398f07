"""Suite-wide test settings: under CI, every hypothesis test draws the same examples."""

from __future__ import annotations

import os

from hypothesis import settings

# A CI run must not pass or fail by the luck of a random seed; locally the default
# profile keeps exploring new examples on every run.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
