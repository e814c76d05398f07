#!/bin/bash
# An sh_test: runs in its runfiles tree, where //greet:count's output is at greet/count.txt.
set -euo pipefail
test "$(cat greet/count.txt)" = 3
