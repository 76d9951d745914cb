"""The kopf-free balancing core: one loop per pool, membership → metrics → policy → targets.

The cluster (:mod:`trimtab.kube`) and local mode (:mod:`trimtab.local`) differ only in the
membership, source, target and sink objects they hand in.
"""
