"""The device farm on Ray: embedded cluster, device workers, dispatcher. Import submodules."""
