"""The standalone ``run.py`` of an exported bundle (``dse export``), in parts: each backend's
``load`` (one module per backend, named in its ``BackendDeclaration.standalone``) and the command
line they share (:mod:`._main`). ``dse.deploy.run_script`` joins a backend's module, ``_main`` and
the recorded settings into one file that needs only the runtime: none of these modules imports
dse, and none is imported by it."""
