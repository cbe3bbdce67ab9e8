"""The model names clients may ask for, known to both the gateway (to reject unknown
names early) and the generator (to pick a backend)."""
from __future__ import annotations

EXTRACTIVE = "extractive"
GEMINI_MODELS = ("gemini-2.5-flash", "gemini-2.5-pro", "gemini-3-low-thinking", "gemini-3-high-thinking")
OPENAI = "openai"  # whatever model OPENAI_MODEL names on the OPENAI_BASE_URL server
LOCAL = "local"  # SmolLM2 through llama-cpp-python, when the local-llm extra is installed
KNOWN_MODELS = (EXTRACTIVE, *GEMINI_MODELS, OPENAI, LOCAL)


def default_model(configured: str, gemini_key: str) -> str:
    """DEFAULT_MODEL when set, else Gemini Flash with a key, else the offline extractive backend."""
    if configured:
        return configured
    return "gemini-2.5-flash" if gemini_key else EXTRACTIVE
