"""The viewer's web app: Starlette routes over the runs (pages and a JSON API), behind a token.

Every request needs the token of the printed URL (``?token=``): without it, 403. Pages are
small shells; ``view.js`` builds them from the API with ``textContent`` only, and a
Content-Security-Policy lets only that script run.
"""

from __future__ import annotations

import functools
import math
import secrets
import time
from importlib import resources
from pathlib import Path
from typing import Any, Awaitable, Callable

import numpy as np
import orjson
import trio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from markupsafe import escape

from ..batch import ControlError, send_command, transcript_name
from ..eval import CompareInputError, compare_runs
from ..report import ReportInputError, build_payload, conversation_css, embed_json, line_entries, prompt_text, read_transcript_bounded, transcript_entries
from ._index import ResultsRewrittenError, scan
from ._query import QueryError, item_lines, query_items, run_stats
from ._runs import Run, discover, workflow_result

PREVIEW = 160
CATCH_UP = 2000  # lines parsed while answering a request (more: the background task does it)
REQUEST_BYTES = 1 << 20  # bytes of a grown file indexed while answering a request (more: the background task)
STEP_BYTES = 16 << 20  # bytes indexed per step of the background task (in a worker thread)
STEP_LINES = 20_000  # lines whose columns are read per step of the background task (in a worker thread)
READY_WAIT_S = 2.0  # how long a request waits for the first lines of a run the background task reads
QUIET_S = 0.15  # the indexing thread waits while requests run and this long after the last one
MAX_GIVE_S = 0.5  # ... but this long at most at a time
MAX_TEXT = 20_000
MAX_CONVERSATION = 200_000
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
Control = Callable[[Run, str, Any], Awaitable[dict[str, Any]]]


def clip(text: Any, limit: int) -> tuple[str | None, int]:
    """``text`` cut to ``limit`` characters, and how many were cut."""
    if text is None:
        return None, 0
    text = text if isinstance(text, str) else str(text)
    return (text, 0) if len(text) <= limit else (text[:limit], len(text) - limit)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class ORJSONResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY, default=str)


class TokenGate:
    """403 for any request without the token (``?token=``), before anything is read."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token.encode("ascii")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = b""
            for part in scope.get("query_string", b"").split(b"&"):
                if part.startswith(b"token="):
                    given = part[len(b"token="):]
            if not secrets.compare_digest(given, self.token):
                response = Response("403 forbidden: open the URL `dsh-orchestra view` printed (it carries the access token)\n",
                                    status_code=403, media_type="text/plain")
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class Viewer:
    """The runs under the paths given, kept indexed; the app serving them."""

    def __init__(self, paths: list[Path], token: str, control: Control | None = None) -> None:
        self.paths = paths
        self.token = token
        self.runs: list[Run] = []
        self.workflows: list[Path] = []  # workflow results (``WorkflowResult.to_json()`` files), by number
        self.requests = 0  # HTTP requests being answered (the indexing thread gives way to them)
        self.last_request = -math.inf  # when the last one ended (time.monotonic)
        self.awaiting_first = 0  # requests waiting for a run's first lines (the indexing thread must not give way then)
        self.control = control
        self.rescan()

    def rescan(self) -> None:
        """Find the results files and summaries under the paths (new ones are added)."""
        workflows: list[Path] = []
        results, summaries = discover(self.paths, workflows)
        self.workflows.extend(path for path in workflows if path not in self.workflows)
        known = {run.results: run for run in self.runs}
        for path in results:
            run = known.get(path)
            if run is None:
                run = Run(len(self.runs), path)
                self.runs.append(run)
                known[path] = run
            found = summaries.get(str(path))
            if found is not None:
                run.attach_summary(*found)

    async def keep_indexed(self, *, interval: float = 0.25, step: int = STEP_LINES) -> None:
        """Forever: index what each run's file gained, then its columns, in steps run in a
        worker thread (the event loop keeps answering requests meanwhile: a page asked for
        while a big file is read is served from the lines read so far)."""
        while True:
            for run in list(self.runs):
                await self._index_run(run, step)
            await trio.sleep(interval)

    async def _index_run(self, run: Run, step: int) -> None:
        index = run.index
        run.busy = True
        try:
            while True:
                _, size = index.check()
                if size != index.end:
                    found = await trio.to_thread.run_sync(scan, index.path, index.end, STEP_BYTES, self.give_way)
                    index.add_scan(found, size)
                # the first lines' columns at once (the first page), the rest after every offset
                if index.parsed < min(CATCH_UP, len(index)) or not index.unread:
                    while (job := index.parse_job(CATCH_UP if index.parsed < CATCH_UP else step)) is not None:
                        index.add_parsed(job, await trio.to_thread.run_sync(job.run, self.give_way))
                        if index.unread:
                            break
                run.ready.set()
                if not index.unread and index.parsed == len(index):
                    break
            run.problem = None
        except FileNotFoundError:
            run.problem = f"{run.results} is gone"
            run.ready.set()
        except OSError as exc:
            run.problem = f"cannot read {run.results}: {exc.strerror or exc}"
            run.ready.set()
        finally:
            run.busy = False

    def give_way(self) -> None:
        """In the indexing thread: wait (GIL released) while requests are answered and a moment
        after (at most ``MAX_GIVE_S``), so that a page's requests get the whole interpreter."""
        until = time.monotonic() + MAX_GIVE_S  # requests without pause must not stop the indexing
        while not self.awaiting_first and (self.requests or time.monotonic() - self.last_request < QUIET_S) and time.monotonic() < until:
            time.sleep(0.01)

    def counting(self, app: ASGIApp) -> ASGIApp:
        """``app``, counting the HTTP requests it answers (``give_way`` waits for them)."""
        async def counted(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":  # the lifespan scope lasts as long as the server
                await app(scope, receive, send)
                return
            self.requests += 1
            try:
                await app(scope, receive, send)
            finally:
                self.requests -= 1
                self.last_request = time.monotonic()
        return counted

    async def current(self, run: Run) -> None:
        """Bring ``run`` up to date before answering about it: index what its file gained
        (a live run's new lines, at once), unless the background task is on it; then wait (a
        moment) for its first lines."""
        if not run.busy:
            self.refresh(run)
        elif not run.ready.is_set():
            self.awaiting_first += 1
            try:
                with trio.move_on_after(READY_WAIT_S):
                    await run.ready.wait()
            finally:
                self.awaiting_first -= 1

    def refresh(self, run: Run, *, max_bytes: int | None = REQUEST_BYTES) -> None:
        """Index what ``run``'s file gained (up to ``max_bytes``), and read the columns of a
        live run's new lines, or of the first lines of a big file, at once."""
        try:
            run.index.refresh(max_bytes)
            if len(run.index) - run.index.parsed <= CATCH_UP or run.index.parsed < CATCH_UP:
                run.index.parse(CATCH_UP)
            run.problem = None
        except FileNotFoundError:
            run.problem = f"{run.results} is gone"
        except OSError as exc:
            run.problem = f"cannot read {run.results}: {exc.strerror or exc}"
        if run.summary is None or not run.summary_path or not run.summary_path.exists():
            if run.live() is None and run.index.parsed == len(run.index) and not run.index.unread:
                self._find_summary(run)

    def _find_summary(self, run: Run) -> None:
        _, summaries = discover([run.results.parent])
        found = summaries.get(str(run.results))
        if found is not None:
            run.attach_summary(*found)

    # ---- the app ----------------------------------------------------------------------------

    def app(self) -> ASGIApp:
        routes = [
            Route("/", self.page("runs")),
            Route("/run/{n:int}", self.page("run")),
            Route("/run/{n:int}/item", self.page("item")),
            Route("/compare", self.page("compare")),
            Route("/workflow/{n:int}", self.page("workflow")),
            Route("/assets/{name}", self.asset),
            Route("/api/runs", self.api_runs),
            Route("/api/run/{n:int}", self.api_run),
            Route("/api/run/{n:int}/items", self.api_items),
            Route("/api/run/{n:int}/item", self.api_item),
            Route("/api/run/{n:int}/control", self.api_control, methods=["POST"]),
            Route("/api/compare", self.api_compare),
            Route("/api/workflow/{n:int}", self.api_workflow),
        ]
        return self.counting(TokenGate(Starlette(routes=routes), self.token))

    def page(self, kind: str) -> Callable[[Request], Awaitable[Response]]:
        async def handler(request: Request) -> Response:
            boot = {"page": kind, "token": self.token, **{k: v for k, v in request.path_params.items()}}
            token = str(escape(self.token))
            html = (
                "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
                "<meta name=viewport content='width=device-width, initial-scale=1'>"
                "<link rel=icon href='data:,'>"
                f"<title>dsh-orchestra view</title><link rel=stylesheet href='/assets/view.css?token={token}'>"
                f"<link rel=stylesheet href='/assets/conversation.css?token={token}'></head>"
                f"<body data-page={kind}><header class=top><a id=home href='/?token={token}'>dsh-orchestra view</a>"
                "<span id=crumbs></span></header><main id=main><p class=muted>Loading…</p></main>"
                "<script type='application/json' id=boot>" + str(embed_json(boot)) + "</script>"
                f"<script src='/assets/view.js?token={token}'></script></body></html>"
            )
            return HTMLResponse(html, headers={"Content-Security-Policy": CSP, "Cache-Control": "no-store",
                                               "Referrer-Policy": "no-referrer"})
        return handler

    async def asset(self, request: Request) -> Response:
        name = request.path_params["name"]
        types = {"view.js": "text/javascript", "view.css": "text/css", "conversation.css": "text/css"}
        if name not in types:
            return Response("not found\n", status_code=404, media_type="text/plain")
        text = conversation_css() if name == "conversation.css" else _asset(name)  # the report's, shared
        return Response(text, media_type=types[name], headers={"Cache-Control": "no-store"})

    def _run(self, request: Request) -> Run | None:
        n = request.path_params["n"]
        return self.runs[n] if 0 <= n < len(self.runs) else None

    async def api_runs(self, request: Request) -> Response:
        self.rescan()
        out = []
        for run in self.runs:
            await self.current(run)
            out.append(self._overview(run))
        workflows = [self._workflow_overview(n, path) for n, path in enumerate(self.workflows)]
        return ORJSONResponse({"runs": out, "workflows": workflows, "paths": [str(p) for p in self.paths]})

    def _workflow_overview(self, n: int, path: Path) -> dict[str, Any]:
        data = workflow_result(path) if path.is_file() else None
        if data is None:
            return {"n": n, "file": str(path), "name": path.name, "problem": f"{path} is gone or no longer a workflow result"}
        steps = [s for s in data["steps"].values() if isinstance(s, dict)]
        return {"n": n, "file": str(path), "name": data["name"], "status": data["status"], "duration_s": _finite(data.get("duration_s")),
                "steps": len(steps), "ok_steps": sum(1 for s in steps if s.get("status") == "ok"),
                "pending": len(data.get("pending") or []), "first_failure": data.get("first_failure"), "problem": None}

    async def api_workflow(self, request: Request) -> Response:
        n = request.path_params["n"]
        if not 0 <= n < len(self.workflows):
            return _missing("no such workflow run")
        path = self.workflows[n]
        try:
            payload = await trio.to_thread.run_sync(functools.partial(build_payload, workflow=path, max_text=MAX_TEXT))
            raw = workflow_result(path) or {}
        except (ReportInputError, OSError) as exc:
            return ORJSONResponse({"error": str(exc)}, status_code=409)
        flow = payload["workflow"]
        for step in flow["steps"]:  # each step's output, clipped (the report shows none)
            output = (raw.get("steps") or {}).get(step["name"], {}).get("output")
            step["output"] = clip(output if isinstance(output, str) or output is None else orjson.dumps(output).decode(), PREVIEW * 4)[0]
        pending = [p for p in raw.get("pending") or [] if isinstance(p, dict)]
        return ORJSONResponse({**flow, "n": n, "file": str(path), "first_failure": raw.get("first_failure"), "pending": pending,
                               "mermaid": flow.get("mermaid")})

    def _overview(self, run: Run) -> dict[str, Any]:
        stats = run_stats(run.index, run.cache)
        summary = run.summary or {}
        live = run.live()
        scores = summary.get("scores") if isinstance(summary.get("scores"), dict) and not live else None
        return {
            "n": run.number, "results": str(run.results), "name": run.results.name,
            "live": live is not None, "holder": live, "problem": run.problem or run.index.problem,
            "lines": stats["lines"], "parsed": stats["parsed"], "items": stats["items"], "ok": stats["ok"], "error": stats["error"],
            "scores": scores if scores is not None else stats["scores"], "scores_source": "summary" if scores is not None else "results",
            "cost_usd": summary.get("cost_usd", stats["cost_usd"]) if not live else stats["cost_usd"],
            "start_time": self._start_time(run), "summary": str(run.summary_path) if run.summary_path else None,
            "generation": run.index.generation, "pending_bytes": run.index.pending, "unread_bytes": run.index.unread,
        }

    def _start_time(self, run: Run) -> str | None:
        start = run.run_info.get("start_time")
        if isinstance(start, str):
            return start
        live = run.live()
        return str(live.get("since")) if live else None

    async def api_run(self, request: Request) -> Response:
        run = self._run(request)
        if run is None:
            return _missing("no such run")
        await self.current(run)
        out = self._overview(run)
        stats = run_stats(run.index, run.cache)
        summary = run.summary
        out.update({
            "stats": stats,
            "summary_data": summary,
            "dataset": str(run.dataset_path) if run.dataset_path else None,
            "transcripts": str(run.transcripts) if run.transcripts else None,
            "audit": str(run.audit) if run.audit else None,
            "progress": await self._progress(run, stats) if out["live"] else None,
            "control": self.control is not None and out["live"],
        })
        return ORJSONResponse(out)

    async def _progress(self, run: Run, stats: dict[str, Any]) -> dict[str, Any] | None:
        if self.control is None:
            return None
        try:
            status = await self.control(run, "status", None)
        except (OSError, ValueError, ControlError):
            return None
        return status

    async def api_items(self, request: Request) -> Response:
        run = self._run(request)
        if run is None:
            return _missing("no such run")
        await self.current(run)
        params = dict(request.query_params)
        params.pop("token", None)
        dataset = run.dataset()
        try:
            page = query_items(run.index, params, run.cache, prompt_search=dataset.search if dataset is not None else None)
            rows = self._rows(run, page["items"])
        except QueryError as exc:
            return ORJSONResponse({"error": str(exc)}, status_code=400)
        except ResultsRewrittenError as exc:
            return ORJSONResponse({"error": str(exc), "retry": True}, status_code=409)
        except OSError as exc:
            return ORJSONResponse({"error": f"cannot read {run.results}: {exc.strerror or exc}"}, status_code=409)
        page["items"] = rows
        page["scorers"] = list(run.index.scores)
        page["lines"] = len(run.index)
        page["parsed"] = run.index.parsed
        page["unread_bytes"] = run.index.unread
        page["generation"] = run.index.generation
        return ORJSONResponse(page)

    def _rows(self, run: Run, groups: list[list[int]]) -> list[dict[str, Any]]:
        flat = [i for lines in groups for i in lines]
        read = dict(zip(flat, run.index.lines(flat), strict=True))
        dataset = run.dataset()
        ids = [str(read[lines[0]].get("id")) for lines in groups]
        expected = dataset.items(ids) if dataset is not None else {}
        rows = []
        for item_id, lines in zip(ids, groups, strict=True):
            epochs = sorted((_epoch_row(read[i], i) for i in lines), key=_epoch_order)  # epoch order, not file order
            item = expected.get(item_id, {})
            scores: dict[str, Any] = {}
            for name in run.index.scores:
                values = [e["scores"].get(name) for e in epochs if isinstance(e["scores"].get(name), (int, float))]
                scores[name] = sum(values) / len(values) if values else None
            durations = [e["duration_s"] for e in epochs if isinstance(e["duration_s"], (int, float))]
            rows.append({
                "id": item_id,
                "status": "ok" if all(e["status"] == "ok" for e in epochs) else next(e["status"] for e in epochs if e["status"] != "ok"),
                "epochs": epochs, "scores": scores,
                "duration_s": sum(durations) / len(durations) if durations else None,
                "prompt": clip(prompt_text(item["prompt"]), PREVIEW)[0] if "prompt" in item else None,
                "target": item.get("target"), "choices": item.get("choices"),
                "response": epochs[0]["response"], "error": epochs[0]["error"], "finish_reason": epochs[0]["finish_reason"],
                "tokens": _sum(e["tokens"] for e in epochs), "cost_usd": _sum(e["cost_usd"] for e in epochs),
            })
        return rows

    async def api_item(self, request: Request) -> Response:
        run = self._run(request)
        item_id = request.query_params.get("id")
        if run is None or not item_id:
            return _missing("no such run, or no ?id=")
        await self.current(run)
        try:
            indexes = item_lines(run.index, item_id, run.cache)
            lines = [(i, line) for i, line in zip(indexes, run.index.lines(indexes), strict=True) if line.get("id") == item_id]
        except ResultsRewrittenError as exc:
            return ORJSONResponse({"error": str(exc), "retry": True}, status_code=409)
        except OSError as exc:
            return ORJSONResponse({"error": f"cannot read {run.results}: {exc.strerror or exc}"}, status_code=409)
        if not lines:
            return _missing(f"no item {item_id!r} in {run.results.name} (yet)")
        dataset = run.dataset()
        item = dataset.items([item_id]).get(item_id, {}) if dataset is not None else {}
        prompt = prompt_text(item["prompt"]) if "prompt" in item else None
        epochs = []
        for index, line in lines:
            epochs.append({**_epoch_row(line, index, full=True), "conversation": self._conversation(run, line, prompt)})
        epochs.sort(key=_epoch_order)  # the file holds epochs as they finished
        return ORJSONResponse({
            "id": item_id, "run": run.number, "name": run.results.name, "prompt": prompt,
            "target": item.get("target"), "choices": item.get("choices"), "metadata": lines[0][1].get("metadata"),
            "epochs": epochs, "has_transcripts": run.transcripts is not None,
        })

    def _conversation(self, run: Run, line: dict[str, Any], prompt: str | None) -> dict[str, Any]:
        transcripts = run.transcripts
        if transcripts is not None:
            epoch = line.get("epoch")
            key = f"{line.get('id')}#{epoch}" if isinstance(epoch, int) and not isinstance(epoch, bool) else str(line.get("id"))
            path = transcripts / transcript_name(key)
            if not path.is_file() and isinstance(epoch, int):
                path = transcripts / transcript_name(str(line.get("id")))
            if path.is_file():
                try:
                    return transcript_entries(read_transcript_bounded(path), line, max_chars=MAX_CONVERSATION, max_text=MAX_TEXT)
                except (OSError, ValueError, EOFError) as exc:
                    fallback = line_entries(line, prompt, max_text=MAX_TEXT)
                    fallback["problem"] = f"the transcript could not be read: {exc}"
                    return fallback
        return line_entries(line, prompt, max_text=MAX_TEXT)

    async def api_control(self, request: Request) -> Response:
        run = self._run(request)
        if run is None:
            return _missing("no such run")
        if self.control is None:
            return ORJSONResponse({"error": "control is not available"}, status_code=400)
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError:
            body = None
        if not isinstance(body, dict) or body.get("command") not in ("pause", "resume", "stop", "status", "concurrency"):
            return ORJSONResponse({"error": "send {\"command\": pause|resume|stop|status|concurrency, \"value\": N}"}, status_code=400)
        try:
            answer = await self.control(run, str(body["command"]), body.get("value"))
        except (OSError, ValueError, ControlError) as exc:
            return ORJSONResponse({"error": str(exc)}, status_code=409)
        return ORJSONResponse(answer)

    async def api_compare(self, request: Request) -> Response:
        try:
            a, b = int(request.query_params.get("a", "")), int(request.query_params.get("b", ""))
            base, candidate = self.runs[a], self.runs[b]
        except (ValueError, IndexError):
            return ORJSONResponse({"error": "give two runs: ?a=N&b=M (numbers from the runs page)"}, status_code=400)
        for run in (base, candidate):
            await self.current(run)
        base_lines = await trio.to_thread.run_sync(run_lines, base)  # offsets only grow meanwhile: the lines asked stay
        candidate_lines = await trio.to_thread.run_sync(run_lines, candidate)
        try:
            doc = await trio.to_thread.run_sync(functools.partial(compare_runs, base_lines, candidate_lines))
        except CompareInputError as exc:
            return ORJSONResponse({"error": str(exc)}, status_code=400)
        flipped: dict[str, list[str]] = {}
        for name, scorer in doc["scorers"].items():
            for kind in ("regressions", "improvements"):
                for item_id in scorer.get(kind) or []:
                    flipped.setdefault(item_id, []).append(f"{name}: {kind[:-1]}")
        for change in doc["status_changes"]:
            flipped.setdefault(change["id"], []).append(f"status {change['base']} → {change['candidate']}")
        return ORJSONResponse({"doc": doc, "base": self._overview(base), "candidate": self._overview(candidate),
                               "flipped": [{"id": k, "why": v} for k, v in flipped.items()]})


async def batch_control(run: Run, command: str, value: Any) -> dict[str, Any]:
    """Send a command to the batch writing ``run``'s results (its control socket).

    Raises:
        ControlError: the run is not running, or it refused the command.
    """
    return await trio.to_thread.run_sync(functools.partial(send_command, run.results, command, value))


COMPARED = ("id", "epoch", "status", "cost_usd", "duration_s")
"""What ``compare_runs`` reads of a line (with the scores' values and error flags and the usage)."""


def run_lines(run: Run) -> list[dict[str, Any]]:
    """What a comparison needs of every parsed line of a run (each epoch; the first line of
    each (id, epoch)), streamed from the file through the offset index: ids, epochs, statuses,
    score values, usage, cost and duration, never the responses or anything else of a line."""
    seen: set[tuple[str, Any]] = set()
    out = []
    for _, raw in run.index.iter_raw(np.arange(run.index.parsed)):
        try:
            line = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if isinstance(line, dict) and isinstance(line.get("id"), str) and isinstance(line.get("status"), str):
            key = (line["id"], line.get("epoch"))
            if key not in seen:
                seen.add(key)
                out.append(_compared(line))
    return out


def _compared(line: dict[str, Any]) -> dict[str, Any]:
    slim = {k: line[k] for k in COMPARED if k in line}
    usage, scores = line.get("usage"), line.get("scores")
    if isinstance(usage, dict):
        slim["usage"] = {k: usage[k] for k in ("input_tokens", "output_tokens", "total_tokens") if k in usage}
    if isinstance(scores, dict):
        slim["scores"] = {name: {k: r[k] for k in ("value", "error") if k in r} if isinstance(r, dict) else r for name, r in scores.items()}
    return slim


def _sum(values: Any) -> float | None:
    present = [v for v in values if isinstance(v, (int, float))]
    return sum(present) if present else None


def _epoch_order(row: dict[str, Any]) -> tuple[int, int]:
    """An epoch row's place: by epoch number (1 without one), then by line."""
    epoch = row.get("epoch")
    return (epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else 1, row["line"])


def _epoch_row(line: dict[str, Any], index: int, *, full: bool = False) -> dict[str, Any]:
    scores: dict[str, Any] = line["scores"] if isinstance(line.get("scores"), dict) else {}
    error = line.get("error") if isinstance(line.get("error"), dict) else None
    usage = line.get("usage") if isinstance(line.get("usage"), dict) else None
    response = line.get("final_response") if isinstance(line.get("final_response"), str) else None
    row: dict[str, Any] = {
        "line": index + 1, "epoch": line.get("epoch"), "status": str(line.get("status")),
        "scores": {name: _finite(r.get("value")) if isinstance(r, dict) else None for name, r in scores.items()},
        "duration_s": _finite(line.get("duration_s")), "finish_reason": line.get("finish_reason"),
        "error": error.get("type") if error else None, "attempts": line.get("attempts"),
        "tokens": usage.get("total_tokens") if usage else None, "cost_usd": _finite(line.get("cost_usd")),
        "response": clip(response, PREVIEW if not full else MAX_TEXT)[0],
    }
    if full:
        row.update({
            "session_id": line.get("session_id"),
            "error_detail": {"type": error.get("type"), "message": clip(error.get("message"), MAX_TEXT)[0]} if error else None,
            "score_details": {name: {"value": _finite(r.get("value")), "answer": clip(r.get("answer"), MAX_TEXT)[0],
                                     "explanation": clip(r.get("explanation"), MAX_TEXT)[0]}
                              for name, r in scores.items() if isinstance(r, dict)},
            "usage": usage, "approvals": line.get("approvals") or [], "subagents": len(line.get("subagents") or []),
            "timings": {k: line.get(k) for k in ("duration_s", "started_at", "ended_at", "queue_s") if k in line},
        })
    return row


def _missing(message: str) -> Response:
    return ORJSONResponse({"error": message}, status_code=404)


@functools.lru_cache(maxsize=4)
def _asset(name: str) -> str:
    return resources.files("dsh_orchestra.view").joinpath("assets", name).read_text(encoding="utf-8")
