"""Running Envoy with trimtab: the bootstrap generator, its command, and a local runner."""
