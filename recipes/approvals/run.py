"""An unattended run with an approval policy, its audit log, and a replay of a proposed policy.

    python recipes/approvals/run.py                 # on the simulated runtime
    python recipes/approvals/run.py --real          # on the bundled dsh, offline (fake model),
                                                    # with the approval relay
    python recipes/approvals/run.py --audit FILE    # keep the audit log (default: a temp dir)

Every prompt runs in its own session, all at once. policy.toml approves read-only tools once
each and rejects everything else; each decision is one line of the audit log and is also in
the TurnResult of the prompt that caused it. Finally the audit log is replayed against
proposed.toml, which is what `dsh-orchestra policy replay AUDIT --policy proposed.toml` prints.
See docs/approvals.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from contextlib import AsyncExitStack
from pathlib import Path

import trio

from dsh_orchestra.approvals import load_policy, read_audit, replay
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.session import TurnResult, open_runtime

HERE = Path(__file__).resolve().parent


def prompts() -> list[dict[str, str]]:
    lines = (HERE / "prompts.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


async def main(real: bool, audit: Path, work: Path) -> int:
    policy = load_policy(str(HERE / "policy.toml"))
    home, workspace = work / "dsh-home", work / "workspace"
    home.mkdir(exist_ok=True)
    workspace.mkdir(exist_ok=True)
    async with AsyncExitStack() as stack:
        if real:
            # Offline: the scripted model server stands in for the provider. With a real
            # provider, drop it and pass base_url/api_key (or DEEPSEEK_* in env) instead.
            from dsh_orchestra.testing import open_fake_model
            from dsh_orchestra.testing import load_script

            model = await stack.enter_async_context(open_fake_model(load_script(HERE / "scenario.toml")))
            spec = RuntimeSpec(dsh_home=home, cwd=workspace, base_url=model.base_url, api_key="offline-demo",
                               env={"DSH_TELEMETRY_MODE": "DISABLED"})  # approval_relay "auto": relayed
        else:
            spec = RuntimeSpec.simulator(script=HERE / "scenario.toml", dsh_home=home, cwd=workspace)
        runtime = await stack.enter_async_context(open_runtime(spec, approvals=policy, audit=audit))
        results: dict[str, TurnResult] = {}

        async def one(item: dict[str, str]) -> None:
            results[item["id"]] = await runtime.session(f"recipe-{item['id']}").run(item["prompt"])

        async with trio.open_nursery() as nursery:
            for item in prompts():
                nursery.start_soon(one, item)
    for item in prompts():
        result = results[item["id"]]
        print(f"{item['id']}: {result.final_response!r} ({result.finish_reason})")
        for record in result.approvals:
            print(f"    {record.tool_name}: {record.outcome} by rule {record.rule!r} via {record.via}")
    print()
    report = await replay(read_audit(audit), load_policy(str(HERE / "proposed.toml")))
    print(report.to_text(source=str(audit), policy="proposed.toml"))
    return 0


def cli(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--real", action="store_true", help="the bundled dsh runtime with the approval relay (offline)")
    parser.add_argument("--audit", type=Path, default=None, help="write the audit log here (appends)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="dsh-orchestra-recipe-") as work:
        audit = args.audit or Path(work) / "audit.jsonl"
        return trio.run(main, args.real, audit, Path(work))


if __name__ == "__main__":
    sys.exit(cli())
