"""Greeting helpers for the example py_binary."""


def greet(name: str) -> str:
    return f"Hello, {name}!"
