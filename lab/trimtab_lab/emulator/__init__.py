"""An HTTP emulator of LLM serving replicas, for tests, demos and benchmarks without GPUs.

Each emulated replica is a real HTTP server (OpenAI-compatible completions with streaming,
``/health``, ``/metrics`` in a chosen engine's format) driven in wall-clock time by the shared
replica model in :mod:`trimtab_lab.replica`, so it batches, fills its KV cache and preempts the way
the fleet simulator says it does. :func:`trimtab_lab.emulator.fleet.emulate` starts several;
``trimtab emulate`` (:mod:`trimtab_lab.emulator.command`) does the same from the command line.
"""
