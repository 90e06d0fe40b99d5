"""Apache TVM (Relax): the backend, MetaSchedule tuning and its database, the thread pool, the VM
profiler, the exported library of a bundle and its run script.

Importing this package registers its backend(s); the runtime itself is imported on first use.
"""

from dse.backends.tvm.backend import TvmBackend

__all__ = ["TvmBackend"]
