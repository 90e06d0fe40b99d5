"""The registries of dse's pluggable parts (:mod:`dse.plugins.registry`) and what each kind of part
declares (:mod:`dse.plugins.backends`). The bottom layer: imports nothing of dse but its exceptions;
the parts register themselves from their own modules."""
