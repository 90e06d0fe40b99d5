"""The device farm on Ray: the embedded cluster, the head and worker nodes, the dispatcher, the
device workers and the farm registry. The trial they run is :mod:`dse.trial`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dse.util import lazy_names

if TYPE_CHECKING:
    from dse.farm.cluster import connect as connect
    from dse.farm.cluster import start_embedded as start_embedded
    from dse.farm.devices import DeviceInfo as DeviceInfo
    from dse.farm.devices import list_devices as list_devices
    from dse.farm.dispatcher import Dispatcher as Dispatcher
    from dse.farm.dispatcher import Done as Done
    from dse.farm.dispatcher import Job as Job
    from dse.farm.head import local_head_address as local_head_address
    from dse.farm.head import start_head as start_head
    from dse.farm.head import stop_head as stop_head
    from dse.farm.head import token_exposure as token_exposure
    from dse.farm.node_commands import RAY_WORKER_PORTS as RAY_WORKER_PORTS
    from dse.farm.node_commands import parse_gpus as parse_gpus
    from dse.farm.single_call import call_device as call_device
    from dse.farm.worker_node import start_worker as start_worker

# Each name loads its module on first use (see dse.util.faces).
_NAMES = {
    "DeviceInfo": "dse.farm.devices",
    "Dispatcher": "dse.farm.dispatcher",
    "Done": "dse.farm.dispatcher",
    "Job": "dse.farm.dispatcher",
    "RAY_WORKER_PORTS": "dse.farm.node_commands",
    "call_device": "dse.farm.single_call",
    "connect": "dse.farm.cluster",
    "list_devices": "dse.farm.devices",
    "local_head_address": "dse.farm.head",
    "parse_gpus": "dse.farm.node_commands",
    "start_embedded": "dse.farm.cluster",
    "start_head": "dse.farm.head",
    "start_worker": "dse.farm.worker_node",
    "stop_head": "dse.farm.head",
    "token_exposure": "dse.farm.head",
}
__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_names(__name__, _NAMES)
