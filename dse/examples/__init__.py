"""Examples that ship with dse: toy evaluators for demos and tests (no hardware, no model)."""
