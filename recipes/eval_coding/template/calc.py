"""A tiny calculator with a bug for the agent to fix."""


def add(a, b):
    return a + b


def subtract(a, b):
    return b - a  # the bug: the operands are swapped
