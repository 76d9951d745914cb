"""trimtab: balances fleets of LLM serving replicas by what they are really doing.

The public interface is the InferencePool CRD and the ``trimtab`` command line; the modules
below are internal and carry no compatibility promise.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
