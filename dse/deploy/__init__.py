"""Exported bundles (``dse export``, ``dse verify``): the bundle's layout and manifest, its
standalone ``run.py``, and the verdict of a verification against the recorded measurement. Plain
files and numbers: building and measuring happen on the device worker (``dse.farm``)."""
