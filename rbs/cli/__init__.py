"""The `rbs` command line: click groups, one module per group, registered in main.py."""
