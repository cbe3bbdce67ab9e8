"""REST/SSE bridge for web clients, in the gateway process: the same pipeline and
events as Gateway.Ask, as `text/event-stream`, plus the small web chat page."""
from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, StreamingResponse
from pydantic import BaseModel, Field

from ragmesh.errors import NotFound, RagmeshError
from ragmesh.models import KNOWN_MODELS
from services.gateway.events import event_json
from ragmesh.store import CorrectionRecord
from services.gateway.history import History
from services.gateway.memory import Memory
from services.gateway.pipeline import AskPipeline
from services.gateway.request import DATA_SOURCES, AskInput

WEB_DIR = Path(__file__).parent / "web"


class AskBody(BaseModel):
    question: str = ""
    data_sources: list[str] = Field(default_factory=list)
    start_date: str | None = ""
    end_date: str | None = ""
    selected_funds: list[str] = Field(default_factory=list)
    conversation_id: str | None = ""
    model: str | None = ""
    tenant: str = ""
    user_id: str = ""
    top_k: int | None = None
    document_ids: list[str] = Field(default_factory=list)

    def to_input(self) -> AskInput:
        return AskInput(
            question=self.question, data_sources=self.data_sources, start_date=self.start_date or "",
            end_date=self.end_date or "", selected_funds=self.selected_funds,
            conversation_id=self.conversation_id or "", model=self.model or "", tenant=self.tenant,
            user_id=self.user_id, top_k=self.top_k, document_ids=self.document_ids,
        )


class StopBody(BaseModel):
    conversation_id: str


class CorrectionBody(BaseModel):
    correction: str
    tenant: str = ""
    user_id: str = ""
    conversation_id: str = ""
    message_id: str = ""
    question: str = ""
    wrong_answer: str = ""

    def record(self) -> CorrectionRecord:
        return CorrectionRecord("", self.tenant, self.user_id, self.question, self.wrong_answer, self.correction,
                                self.conversation_id)


def _error(exc: RagmeshError) -> JSONResponse:
    return JSONResponse({"error": {"code": exc.code, "message": str(exc)}}, status_code=exc.http_status)


def create_app(
    pipeline: AskPipeline,
    history: History,
    memory: Memory,
    health: Callable[[], Awaitable[dict[str, str]]],
    funds: Callable[[], Awaitable[list[str]]],
) -> FastAPI:
    app = FastAPI(title="ragmesh gateway", docs_url="/docs")

    @app.exception_handler(RagmeshError)
    async def _domain_error(request: Request, exc: RagmeshError) -> JSONResponse:
        return _error(exc)

    @app.exception_handler(RequestValidationError)
    async def _bad_body(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = errors[0] if errors else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "body"
        return JSONResponse(
            {"error": {"code": "INVALID_ARGUMENT", "message": f"{where}: {first.get('msg', 'invalid request')}"}},
            status_code=400,
        )

    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(WEB_DIR / "index.html")

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        services = await health()
        ok = all(v == "SERVING" for v in services.values())
        return JSONResponse({"status": "ok" if ok else "degraded", "services": services},
                            status_code=200 if ok else 503)

    @app.get("/api/meta")
    async def meta() -> dict:
        return {"models": list(KNOWN_MODELS), "default_model": pipeline.default_model,
                "data_sources": list(DATA_SOURCES), "funds": await funds()}

    @app.post("/api/chat/ask/stream")
    async def ask_stream(body: AskBody) -> StreamingResponse:
        ask = pipeline.prepare(body.to_input())  # bad input: 400 before the stream starts

        async def sse() -> AsyncIterator[str]:
            async with aclosing(pipeline.run(ask)) as events:
                async for event in events:
                    yield f"data: {json.dumps(event_json(event))}\n\n"

        return StreamingResponse(sse(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @app.post("/api/chat/ask")
    async def ask(body: AskBody) -> JSONResponse:
        ask = pipeline.prepare(body.to_input())
        answer, sources, strategy, done, error = [], {"citations": [], "web_queries": []}, {}, {}, None
        async with aclosing(pipeline.run(ask)) as events:
            async for event in events:
                data = event_json(event)
                if "content" in data:
                    answer.append(data["content"])
                elif "citations" in data:
                    sources = data
                elif "strategy" in data:
                    strategy = data["strategy"]
                elif "done" in data:
                    done = data
                elif "error" in data:
                    error = data["error"]
        if error:
            status = 503 if error["code"] == "UNAVAILABLE" else 500
            return JSONResponse({"error": error}, status_code=status)
        return JSONResponse({
            "answer": "".join(answer), **sources, "conversation_id": ask.conversation_id,
            "meta": {"model": done.get("model", ask.model), "strategy": strategy,
                     "retrieval": {"k": strategy.get("k", 0), "candidateCount": strategy.get("candidate_count", 0),
                                   "timeMs": strategy.get("retrieval_ms", 0.0)}},
        })

    @app.post("/api/corrections")
    async def correct(body: CorrectionBody) -> dict:
        correction_id = await asyncio.to_thread(memory.record_correction, body.record(), body.message_id)
        return {"correction_id": correction_id}

    @app.post("/api/chat/stop")
    async def stop(body: StopBody) -> dict:
        return {"stopped": pipeline.stop(body.conversation_id)}

    @app.get("/api/conversations/{conversation_id}")
    async def conversation(conversation_id: str) -> dict:
        messages = await asyncio.to_thread(history.messages, conversation_id)
        if not messages:
            raise NotFound(f"conversation {conversation_id!r} not found")
        return {"conversation_id": conversation_id,
                "messages": [{"role": m.role, "content": m.content, "created_at": m.created_at, "meta": m.meta}
                             for m in messages]}

    return app
