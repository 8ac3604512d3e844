"""Map-reduce with subagents: one mapper session per document; each mapper spawns one subagent
per section; the subagents' closing messages are typed ``TermCount``s, reduced into one table.

    dsh-orchestra run recipes/map_reduce
    dsh-orchestra run recipes/map_reduce --json

The map step's output is each mapper's own typed report (after its subagents reported back:
``session/wait`` settles the whole session tree). The typed subagent results are on the step
result (``StepResult.subagent_outputs``, and per item ``ItemResult.subagent_outputs``), which is
where the reduce step reads them. Subagents finish in any order, so the reduction sorts.
"""

from __future__ import annotations

import attrs

from dsh_orchestra.workflow import StepContext, Workflow

SCRIPT = "scenario.toml"
INPUTS = {"documents": ["handbook", "changelog"], "terms": ["nursery", "cancel scope"]}


@attrs.frozen
class TermCount:
    """What one section-counting subagent reports."""

    document: str
    section: str
    term: str
    count: int


@attrs.frozen
class MapperReport:
    """What one mapper reports once its subagents are done."""

    document: str
    sections: int


@attrs.frozen
class TermTotal:
    term: str
    count: int
    documents: list[str]


@attrs.frozen
class Reduced:
    """The joined result: totals per term, most frequent first."""

    totals: list[TermTotal]
    sections: int
    subagents: int


workflow = Workflow("map-reduce")


@workflow.step()
async def documents(ctx: StepContext) -> list[str]:
    return [str(d) for d in ctx.workflow_inputs["documents"]]


workflow.prompt(
    "map",
    "MAP {item}: spawn one subagent per section of the document {item}; each counts the terms "
    "{terms} in its section and closes with a JSON object with the keys document, section, term and count. "
    "When they are all done, answer with a JSON object with the keys document and sections.",
    fan_out="documents",
    output=MapperReport,
    subagent_output=TermCount,
    concurrency=2,
)


@workflow.step(depends_on="map")
async def reduce(ctx: StepContext) -> Reduced:
    """Sum the typed subagent results of every mapper."""
    step = ctx.results["map"]
    counts: dict[str, int] = {}
    seen: dict[str, set[str]] = {}
    for count in step.subagent_outputs:
        assert isinstance(count, TermCount)
        counts[count.term] = counts.get(count.term, 0) + count.count
        seen.setdefault(count.term, set()).add(count.document)
    totals = [TermTotal(term=t, count=c, documents=sorted(seen[t])) for t, c in counts.items()]
    totals.sort(key=lambda total: (-total.count, total.term))
    reports: list[MapperReport] = ctx.inputs["map"]
    return Reduced(totals=totals, sections=sum(r.sections for r in reports), subagents=len(step.subagents))
