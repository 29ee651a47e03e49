"""Presentation of a finished results dict: terminal table, conclusion sentence, PNG charts.

Two kinds of results: query sweeps (one timed query per sample, optionally sliced by dataset
variant: rows, engine, slack_type) and time-series runs (`workload.kind == "sysbench"`: tps every
second, judged on the steady state, optionally sliced by thread count). Either way verdicts only
compare values within one slice (same data size, same concurrency). A steps run (`kind ==
"steps"`, of either workload) applies setting changes one on top of the other; any run may also
compare several server builds (`servers_compared`).

Pure formatting: every number shown here was computed elsewhere (see knoblab.stats and
knoblab.timeseries); the only thing recomputed is which seconds to mark as stalls on a chart.

What lives where (each module imports only from those above it):

- knoblab.report.text: formatting helpers (numbers, units, labels) and every sentence — the
  conclusion, stalls, noise, durability, explanation, tied and server lines.
- knoblab.report.tables: print_report and the terminal tables of each kind of run, fitted to
  the console width.
- knoblab.report.charts: write_chart, write_charts and every matplotlib chart.
"""

from knoblab.report.charts import write_chart, write_charts
from knoblab.report.tables import print_report
from knoblab.report.text import (
    conclusion_text,
    durability_lines,
    explanation_lines,
    noise_text,
    point_label,
    server_lines,
    slice_label,
    slices,
    stalls_text,
    tied_text,
)

__all__ = [
    "conclusion_text",
    "durability_lines",
    "explanation_lines",
    "noise_text",
    "point_label",
    "print_report",
    "server_lines",
    "slice_label",
    "slices",
    "stalls_text",
    "tied_text",
    "write_chart",
    "write_charts",
]
