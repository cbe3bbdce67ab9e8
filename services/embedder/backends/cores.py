"""How many threads an encode runs on while others may run beside it: every core alone, an even share
beside another, so calls running at once never ask for more threads than there are cores."""
from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator


class CoreShare:
    def __init__(self, cores: int = 0) -> None:
        self.cores = cores or (os.cpu_count() or 1)
        self._guard = threading.Lock()
        self._running = 0  # encodes under way

    @contextlib.contextmanager
    def share(self) -> Iterator[int]:
        """This encode's threads, for as long as it runs."""
        with self._guard:
            self._running += 1
            threads = max(1, self.cores // self._running)
        try:
            yield threads
        finally:
            with self._guard:
                self._running -= 1
