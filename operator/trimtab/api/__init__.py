"""The InferencePool API (pydantic models, the single source of truth) and internal records.

Lowest layer: no I/O, no imports from the rest of trimtab except :mod:`trimtab.errors`.
"""
