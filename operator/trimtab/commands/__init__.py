"""The ``trimtab`` command line."""
