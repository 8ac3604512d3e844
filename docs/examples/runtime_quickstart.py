"""Launch the real runtime, greet it, run turns, resume a session in a new process.

Runs offline: the scripted fake model from ``dsh_orchestra.testing`` stands in for the
DeepSeek API on 127.0.0.1, and every directory is a fresh temporary one. Against the real
service, drop the fake model and pass ``api_key=os.environ["DEEPSEEK_API_KEY"]`` (and no
``base_url``). Run it with ``python docs/examples/runtime_quickstart.py``.
"""

from __future__ import annotations

import tempfile

import trio

from dsh_orchestra.protocol import MethodNotSupportedError
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.session import open_runtime
from dsh_orchestra.testing import open_fake_model
from dsh_orchestra.testing import parse_script

# What the fake model answers: a prompt containing SPAWN makes it start one subagent.
SCRIPT = parse_script({"rules": [
    {"name": "spawn", "match": "SPAWN", "reply": "spawning", "after_subagents": "the helper is done",
     "spawn": [{"description": "count files", "prompt": "CHILD: count the files", "reply": "3 files"}]},
]})


async def main() -> None:
    with tempfile.TemporaryDirectory() as home, tempfile.TemporaryDirectory() as workspace:
        async with open_fake_model(SCRIPT) as model:
            spec = RuntimeSpec(
                dsh_home=home,  # required: the runtime's state; never ~/.dsh
                cwd=workspace,  # the sessions' working directory (made absolute)
                base_url=model.base_url,  # DEEPSEEK_BASE_URL for the child only
                api_key="offline-placeholder",  # DEEPSEEK_API_KEY for the child only
                env={"DSH_TELEMETRY_MODE": "DISABLED"},
            )
            async with open_runtime(spec) as runtime:  # spawn + initialize; closes on exit
                session = runtime.session("quickstart")
                result = await session.run("Say hello")  # prompt, session/wait, collect
                print("turn", result.turns, result.finish_reason, repr(result.final_response))

                result = await session.run("Please SPAWN a helper")  # waits for the child too
                [child] = result.subagents
                print("turn", result.turns, repr(result.final_response), "child said", repr(child.text))

                try:
                    await session.query("/status")
                except MethodNotSupportedError as exc:
                    print("no session/query:", exc.message)

            async with open_runtime(spec) as runtime:  # a new process, the same DSH_HOME
                session = await runtime.resume("quickstart")
                result = await session.run("Are you still there?")
                print("resumed turn", result.turns, result.finish_reason)


if __name__ == "__main__":
    trio.run(main)
