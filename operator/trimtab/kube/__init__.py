"""Kubernetes: kopf handlers, the API client, status and events, leadership, ConfigMaps.

The only package that imports kopf or talks to the Kubernetes API.
"""
