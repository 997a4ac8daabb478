"""Turn a capture or a run folder into numbers, tables, plots and a report.

from analysis import analyze
metrics = analyze("results/20261122T104512Z-quickstart")   # or a .pcap / .pcapng file
"""

from .capture import Capture, CaptureError, CaptureProblem, read_capture
from .metrics import detect_warmup, flow_table, traffic_metrics
from .report import analyze

__all__ = [
    "analyze",
    "read_capture",
    "Capture",
    "CaptureError",
    "CaptureProblem",
    "traffic_metrics",
    "flow_table",
    "detect_warmup",
]
