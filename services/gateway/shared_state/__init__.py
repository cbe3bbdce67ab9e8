"""Shared conversation state of the gateway replicas (see state.py)."""
from ragmesh.config import Settings
from services.gateway.shared_state.runs import LocalRuns, Run, Runs
from services.gateway.shared_state.state import SharedState, in_process

__all__ = ["LocalRuns", "Run", "Runs", "SharedState", "in_process", "open_shared_state"]


def open_shared_state(settings: Settings) -> SharedState:
    """Redis with REDIS_URL, else this process. Here, above state.py and redis_state.py: the Redis
    state is a SharedState (redis_state imports state), so state.py cannot name it."""
    if not settings.redis_url:
        return in_process(settings)
    from services.gateway.shared_state.redis_state import RedisState  # redis is imported only when used

    return RedisState(settings)
