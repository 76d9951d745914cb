"""Local mode: the operator's balancing loop without Kubernetes (``trimtab run --local``).

Pools come from a YAML file with static endpoints; status goes to logs and a JSON file.
"""
