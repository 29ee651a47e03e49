"""Presentation of a run's results (knoblab.records.Results): terminal table, conclusion
sentence, PNG charts.

Two kinds of results, told apart by the workload's objective: timed runs (one time per sample:
queries, scripts; optionally sliced by dataset variant: rows, engine, slack_type) and time series
(`objective.time_series`: tps every second, judged on the steady state, optionally sliced by
thread count). Either way verdicts only compare values within one slice (same data size, same
concurrency). A steps run (one with `results.steps`) applies setting changes one on top of the
other; any run may also compare several server builds (`results.servers_compared`).

Pure formatting: every number shown here was computed elsewhere (see knoblab.stats and
knoblab.timeseries); the only thing recomputed is which seconds to mark as stalls on a chart.

What lives where (each module imports only from those above it):

- knoblab.report.format: what the others share: numbers, percents, units, and the labels of
  points, slices, steps and servers.
- knoblab.report.text: every sentence — the conclusion, stalls, noise, durability,
  explanation, tied and server lines, and the lines under a steps table.
- knoblab.report.tables: print_report and the terminal tables of each kind of run, fitted to
  the console width.
- knoblab.report.charts: write_chart, write_charts and every matplotlib chart.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from knoblab.report.charts import write_chart, write_charts
    from knoblab.report.format import point_label, slice_label, slices
    from knoblab.report.tables import print_report
    from knoblab.report.text import (
        conclusion_text,
        durability_lines,
        explanation_lines,
        noise_text,
        server_lines,
        stalls_text,
        tied_text,
    )

# Each name from its module on first use: a command that needs a sentence (knoblab runs, a
# run's answer) does not pay for matplotlib, which the charts alone need.
_HOME = {"write_chart": "charts", "write_charts": "charts", "point_label": "format",
         "slice_label": "format", "slices": "format", "print_report": "tables",
         **dict.fromkeys(("conclusion_text", "durability_lines", "explanation_lines",
                          "noise_text", "server_lines", "stalls_text", "tied_text"), "text")}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)


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
