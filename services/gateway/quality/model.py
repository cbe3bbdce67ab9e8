"""One short model call for a quality step: the reply's text within a time limit, or StepFailed
saying why, so the step can fall back."""
from __future__ import annotations

import asyncio
from contextlib import aclosing

from ragmesh.clients import GeneratorClient
from ragmesh.errors import RagmeshError


class StepFailed(Exception):
    """The model gave no usable reply; the message says why (it goes into the strategy event)."""


async def complete(generator: GeneratorClient, model: str, system: str, prompt: str, timeout: float) -> str:
    """The model's reply to `prompt`. Past `timeout` seconds the call is cancelled upstream."""
    async def reply() -> str:
        parts: list[str] = []
        stream = generator.generate(model=model, question=prompt, blocks=[], history=[],
                                    system_instruction=system, prompt=prompt)
        async with aclosing(stream) as events:
            async for event in events:
                if event.kind == "content":
                    parts.append(event.text)
        return "".join(parts).strip()

    try:
        return await asyncio.wait_for(reply(), timeout)
    except asyncio.TimeoutError:
        raise StepFailed(f"no reply from the model within {timeout:g} s") from None
    except RagmeshError as exc:
        raise StepFailed(f"model call failed ({exc.code})") from exc
