"""Shared pieces of the observability tests."""

SCENARIO = '''
[[rules]]
name = "approve"
match = "APPROVE"
reply = "approval was {outcome}"
approval = {tool = "bash", reason = "x"}

[[rules]]
name = "spawn"
match = "SPAWN"
reply = "spawned"
after_subagents = "children done"
[[rules.spawn]]
description = "child work"
prompt = "child task"
reply = "child says hi"
'''
