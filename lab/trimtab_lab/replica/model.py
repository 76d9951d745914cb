"""One LLM serving replica as a stepping object: continuous batching, paged KV, preemption.

The model follows vLLM V1's scheduler: each iteration first gives every decoding request one
token, then continues chunked prefills, then admits waiting requests (FCFS) within
``max_num_seqs`` and ``max_num_batched_tokens``. KV is paged in blocks that fill as tokens are
decoded; when a decode step cannot get a block, the newest running request is preempted back
to the head of the waiting queue and later recomputed. Iteration time comes from the profile.

The same object serves the fleet simulator (:meth:`Replica.advance`, many iterations at once)
and the real-time emulator (:meth:`Replica.step`, one iteration and who got a token in it).
Runs of pure decode iterations are advanced analytically: a decoding request stores the
replica-wide iteration number at which it joined, so its token count, KV blocks and finish
iteration follow from one counter and a per-block-phase histogram, in O(block_size) per run.

Prefix caching (vLLM's automatic prefix caching, SGLang's radix cache) is modelled at the
granularity of *hash blocks* of ``prefix_block_tokens`` tokens (512 for the Mooncake trace's
``hash_ids``), a whole multiple of the engine's KV block, so one hash block is
``prefix_block_tokens / block_size`` KV blocks. A request carries one chained hash per hash block
of its prompt (equal hashes mean equal prefixes); only full blocks are cached. When it is first
scheduled its longest cached leading chain is a hit: those tokens are not prefilled (at least one
prompt token always is, as in vLLM), and the blocks are shared, counted once. Blocks become cached
as prefill chunks complete them; when no running request uses a cached block it stays in KV,
free to be evicted, least recently used first (a request's tail blocks before its head), and only
when free blocks run out. A preempted or finished request frees its own blocks; its hashed blocks
stay cached. Counters count prompt tokens looked up and hit, as vLLM's
``prefix_cache_queries_total`` and ``prefix_cache_hits_total`` do.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict, deque
from collections.abc import Iterator, Sequence

from trimtab_lab.replica.profiles import ReplicaProfile
from trimtab_lab.replica.records import EventKind, ReplicaState, RequestEvent, StepReport

__all__ = ["Replica"]

_WAITING, _PREFILL, _DECODE = 0, 1, 2


class _Request:
    """Mutable bookkeeping of one unfinished request; never leaves this module."""

    __slots__ = (
        "computed",
        "emitted",
        "first_token",
        "hashes",
        "heap_seq",
        "joined",
        "key",
        "output",
        "phase",
        "prompt",
        "request_id",
        "scheduled",
        "shared",
        "target",
    )

    def __init__(
        self, *, request_id: int, prompt: int, output: int, hashes: tuple[int, ...]
    ) -> None:
        self.request_id = request_id
        self.prompt = prompt
        self.output = output
        # Chained hashes of the prompt's full hash blocks; the first ``shared`` are cache
        # entries this request holds a reference on (its blocks, counted in the entries).
        self.hashes = hashes
        self.shared = 0
        self.phase = _WAITING
        # Tokens to prefill: the prompt, plus what was already generated after a preemption.
        self.target = prompt
        self.computed = 0
        # Tokens emitted before the current decode run started (or so far, when not decoding).
        self.emitted = 0
        self.joined = 0
        self.key = 0
        self.heap_seq = -1
        self.scheduled: float | None = None
        self.first_token: float | None = None


class Replica:
    """A replica's engine; drive it with :meth:`submit` plus :meth:`advance` or :meth:`step`.

    Time is a float in seconds on the caller's clock. Iterations are committed when they start:
    a request submitted at ``t`` joins the first iteration starting after the one in progress.
    """

    def __init__(
        self,
        *,
        profile: ReplicaProfile,
        speed: float = 1.0,
        start_s: float = 0.0,
        prefix_block_tokens: int | None = None,
    ) -> None:
        """``prefix_block_tokens`` turns prefix caching on, at that hash-block size."""
        if not speed > 0.0:
            raise ValueError(f"speed must be > 0, got {speed!r}")
        if prefix_block_tokens is not None and (
            prefix_block_tokens < 1 or prefix_block_tokens % profile.block_size
        ):
            raise ValueError(
                f"prefix_block_tokens must be a positive multiple of the KV block size "
                f"{profile.block_size}, got {prefix_block_tokens!r}"
            )
        self.profile = profile
        self.speed = speed
        self.prefix_block_tokens = prefix_block_tokens
        self._entry_blocks = (prefix_block_tokens or 0) // profile.block_size
        # Cache entries by hash with their reference counts; unreferenced ones in LRU order.
        self._cache: dict[int, int] = {}
        self._evictable: OrderedDict[int, None] = OrderedDict()
        self._prefix_queries = 0
        self._prefix_hits = 0
        self._now = start_s
        self._bs = profile.block_size
        self._watermark_blocks = math.ceil(profile.watermark * profile.num_gpu_blocks)
        self._free = profile.num_gpu_blocks
        self._waiting: deque[_Request] = deque()
        self._waiting_tokens = 0
        # Admission order; the last entry is the "newest running request" that gets preempted.
        self._running: dict[int, _Request] = {}
        self._prefilling: dict[int, _Request] = {}
        self._requests: dict[int, _Request] = {}
        self._iteration = 0
        self._decoding = 0
        self._decode_kv_tokens = 0
        # _phase_counts[k]: decoding requests that need a fresh block at iterations i with
        # (k + i) % block_size == 0.
        self._phase_counts = [0] * self._bs
        self._finishes: list[tuple[int, int, _Request]] = []
        self._kv_short_at = -1
        self._heap_seq = 0
        self._preemptions = 0
        self._generated = 0

    # -- observation -------------------------------------------------------------------------

    @property
    def now(self) -> float:
        """End of the last executed iteration (or the last idle time the replica was moved to)."""
        return self._now

    def state(self) -> ReplicaState:
        """What the engine's metrics endpoint would show at :attr:`now`."""
        total = self.profile.num_gpu_blocks
        cached = self._cached_free()
        return ReplicaState(
            time_s=self._now,
            running=len(self._running),
            waiting=len(self._waiting),
            kv_blocks_used=total - self._free - cached,
            kv_blocks_total=total,
            waiting_tokens=self._waiting_tokens,
            preemptions_total=self._preemptions,
            generated_tokens_total=self._generated,
            kv_blocks_cached=cached,
            prefix_queries_total=self._prefix_queries,
            prefix_hits_total=self._prefix_hits,
        )

    def cached_prefix_tokens(self, *, block_hashes: Sequence[int], prompt_tokens: int) -> int:
        """Prompt tokens a request with these hashes would find cached if scheduled now."""
        if self.prefix_block_tokens is None:
            return 0
        usable = self._usable(block_hashes=block_hashes, prompt_tokens=prompt_tokens)
        return self._hit_blocks(hashes=usable, target=prompt_tokens) * self.prefix_block_tokens

    def emitted(self, request_id: int) -> int:
        """Tokens emitted so far by an unfinished request; ``KeyError`` once it finished."""
        request = self._requests[request_id]
        if request.phase == _DECODE:
            return request.emitted + self._iteration - request.joined
        return request.emitted

    def is_idle(self) -> bool:
        """True when nothing is running or waiting."""
        return not self._running and not self._waiting

    # -- input -------------------------------------------------------------------------------

    def submit(
        self,
        *,
        request_id: int,
        prompt_tokens: int,
        output_tokens: int,
        at_s: float,
        block_hashes: Sequence[int] = (),
    ) -> None:
        """Queue a request that arrived at ``at_s`` (``>= now`` only when the replica is idle).

        ``block_hashes``: one chained hash per ``prefix_block_tokens`` of the prompt (a last
        partial block's hash is ignored); without prefix caching they are ignored.
        ``ValueError`` when the request can never be served (HTTP 400 in a real engine).
        """
        if prompt_tokens < 1 or output_tokens < 1:
            raise ValueError("prompt_tokens and output_tokens must be >= 1")
        if prompt_tokens + output_tokens > self.profile.max_model_len:
            raise ValueError(
                f"request {request_id}: {prompt_tokens}+{output_tokens} tokens exceed "
                f"max_model_len {self.profile.max_model_len}"
            )
        if request_id in self._requests:
            raise ValueError(f"request {request_id} is already on this replica")
        if at_s > self._now:
            if not self.is_idle():
                raise ValueError(f"advance the replica to {at_s} before submitting at that time")
            self._now = at_s
        request = _Request(
            request_id=request_id,
            prompt=prompt_tokens,
            output=output_tokens,
            hashes=self._usable(block_hashes=block_hashes, prompt_tokens=prompt_tokens),
        )
        self._requests[request_id] = request
        self._waiting.append(request)
        self._waiting_tokens += request.target

    def abort(self, *, request_id: int) -> None:
        """Drop an unfinished request (client went away) and free its KV blocks."""
        request = self._requests.pop(request_id)
        if request.phase == _WAITING:
            self._waiting.remove(request)
            self._waiting_tokens -= request.target
            return
        self._release(request)

    # -- driving -----------------------------------------------------------------------------

    def next_event_s(self) -> float:
        """When the replica next needs attention if nothing is submitted meanwhile.

        That is :attr:`now` when the next iteration schedules a prefill or a preemption, the end
        of the iteration in which the next request finishes, the start of the iteration that
        will run out of KV blocks, or ``inf`` when idle.
        """
        if self.is_idle():
            return math.inf
        steps = self._decode_run_limit()
        if steps is None:
            return self._now
        return self._now + self._run_seconds(steps)

    def advance(self, *, until_s: float) -> list[RequestEvent]:
        """Execute every iteration that starts at or before ``until_s``; return what happened."""
        events: list[RequestEvent] = []
        while True:
            if self.is_idle():
                self._now = max(self._now, until_s)
                return events
            if self._now > until_s:
                return events
            limit = self._decode_run_limit()
            if limit is None:
                self._mixed_step(events=events, emitted=None)
            else:
                steps = self._steps_starting_by(horizon=until_s - self._now, limit=limit)
                self._decode_steps(steps=steps, events=events)

    def step(self) -> StepReport | None:
        """Execute exactly one iteration from :attr:`now`; ``None`` when idle."""
        if self.is_idle():
            return None
        start = self._now
        events: list[RequestEvent] = []
        emitted: list[int] = []
        if self._decode_run_limit() is None:
            self._mixed_step(events=events, emitted=emitted)
        else:
            emitted.extend(r.request_id for r in self._decoders())
            self._decode_steps(steps=1, events=events)
        return StepReport(
            start_s=start, end_s=self._now, emitted=tuple(emitted), events=tuple(events)
        )

    # -- decode runs -------------------------------------------------------------------------

    def _decoders(self) -> Iterator[_Request]:
        return (r for r in self._running.values() if r.phase == _DECODE)

    def _decode_run_limit(self) -> int | None:
        """Iterations of pure decode possible now: up to a finish or a KV shortfall.

        ``None`` when the next iteration must be scheduled on its own: a prefill is under way,
        the head of the queue fits, or the next decode iteration needs a preemption.
        """
        if self._prefilling or self._decoding == 0:
            return None
        budget = self.profile.max_num_batched_tokens - self._decoding
        if self._waiting and self._head_fits(budget=budget):
            return None
        kv = self._steps_before_kv_runs_out()
        if kv == 0:
            return None
        return min(kv, self._next_finish_iteration() - self._iteration)

    def _next_finish_iteration(self) -> int:
        heap = self._finishes
        while True:
            finish, seq, request = heap[0]
            if request.phase == _DECODE and request.heap_seq == seq:
                return finish
            heapq.heappop(heap)

    def _blocks_needed_at(self, iteration: int) -> int:
        return self._phase_counts[-iteration % self._bs]

    def _blocks_needed(self, *, steps: int) -> int:
        cycles, rest = divmod(steps, self._bs)
        total = cycles * self._decoding
        for offset in range(rest):
            total += self._blocks_needed_at(self._iteration + offset)
        return total

    def _steps_before_kv_runs_out(self) -> int:
        # The shortfall iteration is fixed while the batch is unchanged, so it is cached as an
        # absolute iteration and dropped whenever a request joins or leaves the batch.
        if self._kv_short_at < 0:
            # Every block_size iterations each decoding request takes exactly one block.
            counts, size, start = self._phase_counts, self._bs, self._iteration
            available = self._available()
            cycles = available // self._decoding
            left = available - cycles * self._decoding
            steps = cycles * size
            while counts[-(start + steps) % size] <= left:
                left -= counts[-(start + steps) % size]
                steps += 1
            self._kv_short_at = start + steps
        return self._kv_short_at - self._iteration

    def _run_seconds(self, steps: int) -> float:
        """Seconds taken by the next ``steps`` pure-decode iterations (KV grows every step)."""
        p = self.profile
        first = p.step_time_s(
            seqs=self._decoding, kv_tokens=self._decode_kv_tokens, prefill_tokens=0
        )
        growth = p.step_per_kv_token_s * self._decoding
        return (first * steps + growth * steps * (steps - 1) / 2) / self.speed

    def _steps_starting_by(self, *, horizon: float, limit: int) -> int:
        """How many of the next ``limit`` decode iterations start within ``horizon`` seconds."""
        if self._run_seconds(limit - 1) <= horizon:
            return limit
        p = self.profile
        a = p.step_time_s(seqs=self._decoding, kv_tokens=self._decode_kv_tokens, prefill_tokens=0)
        a /= self.speed
        b = p.step_per_kv_token_s * self._decoding / self.speed
        # Iteration k starts at a*k + b*k*(k-1)/2; solve for the last k at or before horizon,
        # in the cancellation-free form of the quadratic root, then fix float rounding.
        half = a - b / 2
        root = 2 * horizon / (half + math.sqrt(half * half + 2 * b * horizon))
        count = min(limit, int(root) + 1)
        while count > 1 and self._run_seconds(count - 1) > horizon:
            count -= 1
        while count < limit and self._run_seconds(count) <= horizon:
            count += 1
        return count

    def _decode_steps(self, *, steps: int, events: list[RequestEvent]) -> None:
        self._take(self._blocks_needed(steps=steps))
        self._now += self._run_seconds(steps)
        self._iteration += steps
        self._decode_kv_tokens += self._decoding * steps
        self._generated += self._decoding * steps
        self._collect_finishes(events)

    def _collect_finishes(self, events: list[RequestEvent]) -> None:
        heap = self._finishes
        while heap:
            finish, seq, request = heap[0]
            if request.phase != _DECODE or request.heap_seq != seq:
                heapq.heappop(heap)
                continue
            if finish > self._iteration:
                return
            heapq.heappop(heap)
            self._release(request)
            del self._requests[request.request_id]
            events.append(
                RequestEvent(
                    kind=EventKind.FINISHED, request_id=request.request_id, time_s=self._now
                )
            )

    # -- one scheduled iteration -------------------------------------------------------------

    def _head_fits(self, *, budget: int) -> bool:
        if len(self._running) >= self.profile.max_num_seqs or budget <= 0:
            return False
        if not self._running:
            # Alone on the replica a request always gets in; max_model_len bounds its KV.
            return True
        head = self._waiting[0]
        hit = self._hit_blocks(hashes=head.hashes, target=head.target)
        # Hit entries nobody uses yet stop being evictable once the head references them.
        pinned = sum(self._cache[h] == 0 for h in head.hashes[:hit]) * self._entry_blocks
        hit_tokens = hit * self._entry_blocks * self._bs
        chunk = min(head.target - hit_tokens, budget)
        blocks = -(-(hit_tokens + chunk) // self._bs) - hit * self._entry_blocks
        return self._available() - pinned - blocks >= self._watermark_blocks

    def _mixed_step(self, *, events: list[RequestEvent], emitted: list[int] | None) -> None:
        """One iteration that prefills, admits or preempts (vLLM V1 ``schedule()`` order)."""
        p = self.profile
        start = self._now
        bs = self._bs
        preempted = False
        need = self._blocks_needed_at(self._iteration) if self._decoding else 0
        while need > self._available():
            if self._preempt_newest(events):
                need -= 1
            preempted = True
        self._take(need)
        budget = p.max_num_batched_tokens - self._decoding
        # Chunks are counted as computed when scheduled, so a request preempted later in this
        # iteration frees the blocks its chunk took.
        chunks: list[tuple[_Request, int]] = []
        for request in list(self._prefilling.values()):
            if budget <= 0 or request.phase != _PREFILL:
                break
            chunk = min(request.target - request.computed, budget)
            blocks = -(-(request.computed + chunk) // bs) - -(-request.computed // bs)
            while blocks > self._available() and request.phase == _PREFILL:
                if self._preempt_newest(events):
                    # That decoder's block for this iteration was already taken.
                    self._free += 1
                preempted = True
            if request.phase != _PREFILL:
                break
            self._take(blocks)
            request.computed += chunk
            chunks.append((request, chunk))
            budget -= chunk
        while not preempted and self._waiting and self._head_fits(budget=budget):
            request = self._waiting.popleft()
            self._waiting_tokens -= request.target
            hit_tokens = self._look_up(request)
            chunk = min(request.target - hit_tokens, budget)
            self._take(-(-(hit_tokens + chunk) // bs) - request.shared * self._entry_blocks)
            request.phase = _PREFILL
            request.computed = hit_tokens + chunk
            if request.scheduled is None:
                request.scheduled = start
            self._running[request.request_id] = request
            self._prefilling[request.request_id] = request
            chunks.append((request, chunk))
            budget -= chunk
        if emitted is not None:
            emitted.extend(r.request_id for r in self._decoders())
        chunks = [(r, c) for r, c in chunks if r.phase == _PREFILL]
        if self.prefix_block_tokens is not None:
            for request, _ in chunks:
                self._register(request)
        prefill = sum(c for _, c in chunks)
        kv_read = self._decode_kv_tokens + sum(r.computed for r, _ in chunks) - prefill
        seconds = p.step_time_s(
            seqs=self._decoding + len(chunks), kv_tokens=kv_read, prefill_tokens=prefill
        )
        self._now = start + seconds / self.speed
        self._iteration += 1
        self._decode_kv_tokens += self._decoding
        self._generated += self._decoding
        self._collect_finishes(events)
        for request, _ in chunks:
            if request.computed == request.target:
                self._finish_prefill(request, events, emitted)
        self._kv_short_at = -1

    def _preempt_newest(self, events: list[RequestEvent]) -> bool:
        """Preempt the newest running request; True if it needed a block this iteration."""
        victim = next(reversed(self._running.values()))
        needed = victim.phase == _DECODE and (victim.key + self._iteration) % self._bs == 0
        self._preempt(victim, events)
        return needed

    def _finish_prefill(
        self, request: _Request, events: list[RequestEvent], emitted: list[int] | None
    ) -> None:
        del self._prefilling[request.request_id]
        self._kv_short_at = -1
        request.emitted += 1
        self._generated += 1
        if emitted is not None:
            emitted.append(request.request_id)
        if request.first_token is None:
            request.first_token = self._now
            events.append(
                RequestEvent(
                    kind=EventKind.FIRST_TOKEN,
                    request_id=request.request_id,
                    time_s=self._now,
                    scheduled_s=request.scheduled,
                )
            )
        if request.emitted >= request.output:
            self._free_blocks(request, tokens=request.target)
            del self._running[request.request_id]
            del self._requests[request.request_id]
            events.append(
                RequestEvent(
                    kind=EventKind.FINISHED, request_id=request.request_id, time_s=self._now
                )
            )
            return
        request.phase = _DECODE
        request.joined = self._iteration
        request.key = (request.target - self._iteration) % self._bs
        self._phase_counts[request.key] += 1
        self._decoding += 1
        self._decode_kv_tokens += request.target
        self._heap_seq += 1
        request.heap_seq = self._heap_seq
        finish = self._iteration + request.output - request.emitted
        heapq.heappush(self._finishes, (finish, self._heap_seq, request))

    def _release(self, request: _Request) -> None:
        """Take a running request out of the batch and free its blocks."""
        self._kv_short_at = -1
        if request.phase == _DECODE:
            tokens = request.target + self._iteration - request.joined
            request.emitted += self._iteration - request.joined
            self._phase_counts[request.key] -= 1
            self._decoding -= 1
            self._decode_kv_tokens -= tokens
        else:
            tokens = request.computed
            del self._prefilling[request.request_id]
        self._free_blocks(request, tokens=tokens)
        del self._running[request.request_id]
        request.phase = _WAITING

    def _preempt(self, request: _Request, events: list[RequestEvent]) -> None:
        self._release(request)
        # Recompute: the prompt and every token generated so far are prefilled again.
        request.target = request.prompt + request.emitted
        request.computed = 0
        self._waiting.appendleft(request)
        self._waiting_tokens += request.target
        self._preemptions += 1
        events.append(
            RequestEvent(kind=EventKind.PREEMPTED, request_id=request.request_id, time_s=self._now)
        )

    # -- KV blocks and the prefix cache ------------------------------------------------------

    def _cached_free(self) -> int:
        """KV blocks held by cache entries that no running request uses (evictable)."""
        return len(self._evictable) * self._entry_blocks

    def _available(self) -> int:
        """Blocks an allocation may take: free ones plus evictable cached ones."""
        return self._free + len(self._evictable) * self._entry_blocks

    def _take(self, blocks: int) -> None:
        """Allocate ``blocks`` (callers checked :meth:`_available`), evicting LRU entries."""
        self._free -= blocks
        while self._free < 0:
            victim, _ = self._evictable.popitem(last=False)
            del self._cache[victim]
            self._free += self._entry_blocks

    def _usable(self, *, block_hashes: Sequence[int], prompt_tokens: int) -> tuple[int, ...]:
        if self.prefix_block_tokens is None:
            return ()
        return tuple(block_hashes[: prompt_tokens // self.prefix_block_tokens])

    def _hit_blocks(self, *, hashes: tuple[int, ...] | Sequence[int], target: int) -> int:
        """Leading cached blocks, leaving at least one token of ``target`` to compute."""
        if not hashes:
            return 0
        limit = min(len(hashes), (target - 1) // (self._entry_blocks * self._bs))
        cache = self._cache
        hit = 0
        while hit < limit and hashes[hit] in cache:
            hit += 1
        return hit

    def _look_up(self, request: _Request) -> int:
        """Reference the request's cached leading blocks at its scheduling; the hit tokens."""
        if self.prefix_block_tokens is None:
            return 0
        hit = self._hit_blocks(hashes=request.hashes, target=request.target)
        for block in request.hashes[:hit]:
            refs = self._cache[block]
            if refs == 0:
                del self._evictable[block]
            self._cache[block] = refs + 1
        request.shared = hit
        hit_tokens = hit * self.prefix_block_tokens
        self._prefix_queries += request.target
        self._prefix_hits += hit_tokens
        return hit_tokens

    def _register(self, request: _Request) -> None:
        """Cache the hash blocks the request's prefill has completed so far."""
        assert self.prefix_block_tokens is not None
        upto = min(len(request.hashes), request.computed // self.prefix_block_tokens)
        for block in request.hashes[request.shared : upto]:
            refs = self._cache.get(block)
            if refs is None:
                # The request's own blocks become the entry's.
                self._cache[block] = 1
                continue
            # Another request computed the same block meanwhile: share it, free the copy.
            if refs == 0:
                del self._evictable[block]
            self._cache[block] = refs + 1
            self._free += self._entry_blocks
        request.shared = max(request.shared, upto)

    def _free_blocks(self, request: _Request, *, tokens: int) -> None:
        """Free a leaving request's own blocks and drop its references on cached ones."""
        self._free += -(-tokens // self._bs) - request.shared * self._entry_blocks
        # Tail first, so the chain's head is the most recent and is evicted last.
        for block in reversed(request.hashes[: request.shared]):
            refs = self._cache[block] - 1
            self._cache[block] = refs
            if refs == 0:
                self._evictable[block] = None
        request.shared = 0
