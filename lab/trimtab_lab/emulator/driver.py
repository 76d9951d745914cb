"""Run one replica model in wall-clock time and hand out tokens as its iterations end.

The model (:class:`trimtab_lab.replica.Replica`) executes one iteration per :meth:`step` and says
when it ends and which requests got a token. The driver sleeps until that moment (divided by
the time scale) before releasing the tokens, so clients see the model's latencies. When it
falls behind it steps on without sleeping, so a heavy batch slows streams as it would on a GPU
instead of drifting the clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import itertools

from trimtab_lab.replica import EventKind, Replica, ReplicaProfile, ReplicaState

__all__ = ["DriverState", "ReplicaDriver", "Stream"]

# Sleeping less than this costs more in wake-ups than it buys in timing accuracy.
_MIN_SLEEP_S = 0.001
# Steps taken back to back while behind before yielding to the HTTP handlers.
_STEPS_PER_YIELD = 64


class DriverState(enum.Enum):
    NEW = enum.auto()
    RUNNING = enum.auto()
    STOPPED = enum.auto()


class Stream:
    """Tokens released so far for one request; the HTTP handler waits on it."""

    def __init__(self, *, request_id: int, max_tokens: int) -> None:
        self.request_id = request_id
        self.max_tokens = max_tokens
        self.released = 0
        self.finished = False
        self.cancelled = False
        """The emulator shut down before the request finished."""
        self._changed = asyncio.Event()

    async def wait(self, *, seen: int) -> None:
        """Return once more than ``seen`` tokens are out, or the stream ended."""
        while self.released <= seen and not (self.finished or self.cancelled):
            self._changed.clear()
            await self._changed.wait()

    def notify(self) -> None:
        """Wake the handler waiting in :meth:`wait` (called by the driver only)."""
        self._changed.set()


class ReplicaDriver:
    """Owns a :class:`Replica` and the task that steps it; one per emulated replica."""

    def __init__(
        self,
        *,
        profile: ReplicaProfile,
        speed: float = 1.0,
        time_scale: float = 1.0,
        prefix_block_tokens: int | None = None,
    ):
        if not time_scale > 0:
            raise ValueError(f"time_scale must be > 0, got {time_scale!r}")
        self.time_scale = time_scale
        self._replica = Replica(
            profile=profile, speed=speed, start_s=0.0, prefix_block_tokens=prefix_block_tokens
        )
        self._streams: dict[int, Stream] = {}
        self._ids = itertools.count(1)
        self._wakeup = asyncio.Event()
        self._origin = 0.0
        self._task: asyncio.Task[None] | None = None
        self.state = DriverState.NEW

    @property
    def profile(self) -> ReplicaProfile:
        return self._replica.profile

    def start(self) -> None:
        if self.state is not DriverState.NEW:
            raise RuntimeError(f"cannot start a driver that is {self.state.name}")
        self._origin = asyncio.get_running_loop().time()
        self._task = asyncio.create_task(self._run(), name="emulator-replica-driver")
        self.state = DriverState.RUNNING

    async def stop(self) -> None:
        """Stop stepping and end every open stream (as cancelled)."""
        if self.state is DriverState.STOPPED:
            return
        self.state = DriverState.STOPPED
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for stream in self._streams.values():
            stream.cancelled = True
            stream.notify()
        self._streams.clear()

    def model_now(self) -> float:
        """Model seconds since start: wall seconds times the time scale."""
        return (asyncio.get_running_loop().time() - self._origin) * self.time_scale

    def metrics_state(self) -> ReplicaState:
        return self._replica.state()

    def submit(
        self, *, prompt_tokens: int, max_tokens: int, block_hashes: tuple[int, ...] = ()
    ) -> Stream:
        """Queue a request; ``ValueError`` when the model can never serve it."""
        if self.state is not DriverState.RUNNING:
            raise RuntimeError(f"replica is {self.state.name}, not accepting requests")
        request_id = next(self._ids)
        replica = self._replica
        # While busy the model may already be at the end of the iteration being waited for;
        # a request arriving meanwhile joins the next one.
        at = self.model_now() if replica.is_idle() else min(self.model_now(), replica.now)
        replica.submit(
            request_id=request_id,
            prompt_tokens=prompt_tokens,
            output_tokens=max_tokens,
            at_s=at,
            block_hashes=block_hashes,
        )
        stream = Stream(request_id=request_id, max_tokens=max_tokens)
        self._streams[request_id] = stream
        self._wakeup.set()
        return stream

    def abandon(self, stream: Stream) -> None:
        """The client went away: free the request's batch slot and KV blocks."""
        if self._streams.pop(stream.request_id, None) is not None and not stream.finished:
            # The model may have finished it in the iteration whose end is still being slept
            # towards; then there is nothing left to free.
            with contextlib.suppress(KeyError):
                self._replica.abort(request_id=stream.request_id)

    async def _run(self) -> None:
        steps_without_sleep = 0
        while self.state is DriverState.RUNNING:
            report = self._replica.step()
            if report is None:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            delay = (report.end_s - self.model_now()) / self.time_scale
            if delay >= _MIN_SLEEP_S:
                await asyncio.sleep(delay)
                steps_without_sleep = 0
            else:
                steps_without_sleep += 1
                if steps_without_sleep >= _STEPS_PER_YIELD:
                    await asyncio.sleep(0)
                    steps_without_sleep = 0
            for request_id in report.emitted:
                stream = self._streams.get(request_id)
                if stream is not None:
                    stream.released += 1
                    stream.notify()
            for event in report.events:
                if event.kind is EventKind.FINISHED:
                    finished = self._streams.pop(event.request_id, None)
                    if finished is not None:
                        finished.finished = True
                        finished.notify()
