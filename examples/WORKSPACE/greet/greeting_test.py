"""A py_test: passes when it exits 0."""

from greet.greeting import greet

assert greet("rbs") == "Hello, rbs!", greet("rbs")
print("ok")
