"""Measurements without a device: custom evaluator functions (run where none can stop the
campaign) and recorded replay tables."""
