"""dse's own samplers (registered by name, :mod:`dse.plugins.samplers`): the default surrogate
sampler, its regression forest, acquisition and candidate features."""
