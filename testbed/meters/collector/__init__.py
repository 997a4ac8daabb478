"""The collector of the flow meters: nfcapd with nfdump read-back (nfdump.py), the count of the
records in the captured export packets (export.py), the collector itself (nfcapd.py) and, as a
step's part, its `PartPlugin` (part.py: `testbed.meters.collector.part:PLUGIN`)."""

from .export import ExportCount, count_export, exported_records
from .nfcapd import COLLECTOR_TOOLS, Collector, CollectorError
from .nfdump import ReadBackError, read_flows

__all__ = [
    "COLLECTOR_TOOLS",
    "Collector",
    "CollectorError",
    "ExportCount",
    "ReadBackError",
    "count_export",
    "exported_records",
    "read_flows",
]
