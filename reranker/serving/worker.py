"""A background thread with a bounded queue, for work that must stay off the request path."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")
logger = logging.getLogger(__name__)


class BackgroundWorker(Generic[T]):
    """Handles submitted jobs one at a time, in order, on a daemon thread.

    `submit` never blocks: when the queue is full the job is refused (the caller counts the drop), so a
    slow feature store or shadow model can delay only its own work, never a request.
    """

    def __init__(self, name: str, handle: Callable[[T], None], maxsize: int) -> None:
        self._handle = handle
        self._queue: queue.Queue[T | None] = queue.Queue(maxsize)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, job: T) -> bool:
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            return False
        return True

    def drain(self, timeout: float) -> bool:
        """Wait until every submitted job has been handled; False on timeout."""
        with self._queue.all_tasks_done:
            return self._queue.all_tasks_done.wait_for(lambda: self._queue.unfinished_tasks == 0, timeout)

    def close(self, timeout: float, discard_pending: bool = False) -> None:
        """Stop after the queued jobs (or drop them first); stop waiting after `timeout` (a daemon thread)."""
        while discard_pending:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
            self._queue.task_done()
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            return
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            try:
                if job is None:
                    return
                self._handle(job)
            except Exception:
                # Handlers count their own expected failures; this is a bug, and it must not end the thread.
                logger.exception("%s: job failed", self._thread.name)
            finally:
                self._queue.task_done()
