"""Small utilities any layer may use: atomic writes, counters, dominance and order statistics,
host facts, the user's cache folder."""
