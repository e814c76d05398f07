"""Print the banner built by //greet:banner, then greet everyone named on the command line."""

import os
import sys

from greet.greeting import greet

runfiles = os.path.join(os.environ["RUNFILES_DIR"], "example", "greet")
with open(os.path.join(runfiles, "banner.txt")) as f:
    print(f.read(), end="")
with open(os.path.join(runfiles, "count.txt")) as f:
    print(f"({f.read().strip()} words)")
for name in sys.argv[1:] or ["world"]:
    print(greet(name))
