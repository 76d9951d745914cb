"""The admission logic: exact per-pod in-flight caps and one shared queue. Pure: no I/O."""
