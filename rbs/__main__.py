"""`python -m rbs` runs the command line."""

from rbs.cli.main import main

main()
