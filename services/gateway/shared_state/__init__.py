"""Shared conversation state of the gateway replicas (see state.py)."""
from services.gateway.shared_state.runs import LocalRuns, Run, Runs
from services.gateway.shared_state.state import SharedState, in_process, open_shared_state

__all__ = ["LocalRuns", "Run", "Runs", "SharedState", "in_process", "open_shared_state"]
