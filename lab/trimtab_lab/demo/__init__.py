"""``trimtab demo``: real emulators, real Envoy and trimtab compared on the same arrivals."""
