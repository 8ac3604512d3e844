"""Fixtures of the pool tests (the helpers live in pool_support.py)."""

from pool_support import pool_script as pool_script, sim_process as sim_process  # noqa: F401
