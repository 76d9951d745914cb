"""trimtab's built-in xDS control plane for Envoy (ADS, state of the world, CDS + EDS).

``resources`` builds the protos, ``snapshots`` freezes and hashes them, ``cache`` holds the
served snapshot behind the ready gate, ``acks`` records what each Envoy acknowledged,
``stream`` speaks the protocol on one stream and ``server`` runs the gRPC server.
"""
