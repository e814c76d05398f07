"""rbs build: Starlark BUILD files, rules, analysis to an action graph, and local execution."""
