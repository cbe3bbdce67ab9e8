"""Whether a service takes calls: not while it warms up (a model loading, indexes rebuilding, a
database not reached yet), not once it drains on SIGTERM. A call it does not take is refused with
NotReady (UNAVAILABLE on the wire, health NOT_SERVING to match), never run half-ready into an
INTERNAL: callers retry UNAVAILABLE (ragmesh.clients) and reach it, or a replica, once it is ready."""
from __future__ import annotations

import enum

from ragmesh.errors import Unavailable


class NotReady(Unavailable):
    """The service refused the call before running any of it: sending it again is always safe."""


class State(enum.Enum):
    WARMING = "warming up"
    SERVING = "serving"
    DRAINING = "shutting down"


class Readiness:
    """One service's state. Single event loop: no lock needed."""

    def __init__(self, service: str, state: State = State.WARMING) -> None:
        self.service = service
        self.state = state

    @property
    def serving(self) -> bool:
        return self.state is State.SERVING

    def warmed(self) -> None:
        """Warm-up finished: calls are taken from now on, unless the service is draining already."""
        if self.state is State.WARMING:
            self.state = State.SERVING

    def drain(self) -> None:
        """SIGTERM: calls in flight finish, new ones are refused from now on."""
        self.state = State.DRAINING

    def check(self) -> None:
        """Raises NotReady unless the service is serving."""
        if self.state is not State.SERVING:
            raise NotReady(f"{self.service} is {self.state.value} and takes no calls now; retry")
