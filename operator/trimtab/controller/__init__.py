"""The operator: one balancing loop per InferencePool, driven by kopf in a cluster.

``loop`` holds the kopf-free core (membership → metrics → policy → targets → report) that
local mode reuses; ``handlers`` and ``running`` are the only modules that import kopf.
"""
