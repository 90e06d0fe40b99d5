"""The device farm on Ray: the embedded cluster, the head and worker nodes, the dispatcher, the device
workers and the farm registry. The trial they run is :mod:`dse.trial`."""
