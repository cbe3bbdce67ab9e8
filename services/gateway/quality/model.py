"""One short model call for a quality step: the reply's text within a time limit, or StepFailed
saying why, so the step can fall back."""
from __future__ import annotations

import asyncio

from ragmesh.clients import GeneratorClient
from ragmesh.errors import RagmeshError

STEP_TEMPERATURE = 0.0


class StepFailed(Exception):
    """The model gave no usable reply; the message says why (it goes into the strategy event)."""


async def complete(generator: GeneratorClient, model: str, system: str, prompt: str, timeout: float) -> str:
    """The model's reply to `prompt`, at temperature 0: a step is a judgement (variants, scores,
    sentences kept), asked twice it should say the same. Past `timeout` seconds the call is cancelled upstream."""
    reply = generator.complete(model=model, system_instruction=system, prompt=prompt, temperature=STEP_TEMPERATURE)
    try:
        return (await asyncio.wait_for(reply, timeout)).strip()
    except asyncio.TimeoutError:
        raise StepFailed(f"no reply from the model within {timeout:g} s") from None
    except RagmeshError as exc:
        raise StepFailed(f"model call failed ({exc.code})") from exc
