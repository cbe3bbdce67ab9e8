"""The model names clients may ask for, known to both the gateway (to reject unknown
names early) and the generator (to pick a backend), with what configures each and which
can search the web."""
from __future__ import annotations

EXTRACTIVE = "extractive"
GEMINI_MODELS = ("gemini-2.5-flash", "gemini-2.5-pro", "gemini-3-low-thinking", "gemini-3-high-thinking")
OPENAI = "openai"  # whatever model OPENAI_MODEL names on the OPENAI_BASE_URL server
LOCAL = "local"  # SmolLM2 through llama-cpp-python, when the local-llm extra is installed
KNOWN_MODELS = (EXTRACTIVE, *GEMINI_MODELS, OPENAI, LOCAL)
# Google Search grounding is a Gemini tool: the other backends answer from internal data only.
WEB_SEARCH_MODELS = GEMINI_MODELS


def default_model(configured: str, gemini_key: str) -> str:
    """DEFAULT_MODEL when set, else Gemini Flash with a key, else the offline extractive backend."""
    if configured:
        return configured
    return "gemini-2.5-flash" if gemini_key else EXTRACTIVE


def how_to_configure(model: str) -> str:
    """What an operator sets so that the generator serves `model` (for errors naming a model that is not)."""
    if model in GEMINI_MODELS:
        return "set GEMINI_API_KEY on the generator"
    if model == OPENAI:
        return "set OPENAI_BASE_URL (and OPENAI_MODEL) on the generator"
    if model == LOCAL:
        return "install the local-llm extra (pip install 'ragmesh[local-llm]') on the generator"
    return "it is always served"


def not_configured(model: str, configured: list[str] | tuple[str, ...]) -> str:
    """The message of a refusal to answer with a model that is known but not configured."""
    return (f"model {model!r} is not configured on this deployment ({how_to_configure(model)}); "
            f"configured: {', '.join(configured)}")
