"""The report of `knoblab verify`: production's own values (A) against the recommendation's (B)
on the server itself, from the answer knoblab.verifying made (its verify.json): the finding
beside the sandbox's claim, the figures of A and B, and a chart of the windows over time, A
and B coloured, so that a trend in the load or the guard's moment can be seen."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from matplotlib.patches import Patch

from knoblab.report.charts import save_figure
from knoblab.report.document import Chart, Document, table
from knoblab.vocabulary import VerifyStop

COLOURS = {"A": "#4477aa", "B": "#ee6677"}
LABELS = {"A": "A: production's own", "B": "B: recommended"}
FIGURES = {  # what each figure is called, and whether higher is better
    "latency_ms": ("mean statement latency (Little's law), ms", False),
    "digest_latency_ms": ("mean statement latency (performance_schema), ms", False),
    "statements_per_s": ("statements a second", True),
    "transactions_per_s": ("transactions a second", True),
    "threads_running": ("Threads_running, mean", False),
    "pool_reads_per_statement": ("pages read from disk per statement", False),
    "rows_read_per_statement": ("rows read per statement", False),
    "tmp_disk_tables_per_s": ("temporary tables on disk a second", False),
    "errors_per_s": ("errors a second", False),
    "cpu_ms_per_statement": ("server CPU per statement, ms", False),
}


def figure_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Each figure measured: A's and B's means over their windows, and B's change."""
    rows = []
    for key, (label, higher) in FIGURES.items():
        got = (result.get("figures") or {}).get(key) or {}
        a, b = got.get("a"), got.get("b")
        if a is None and b is None:
            continue
        change = None if not a or b is None else b / a - 1
        rows.append({"figure": label, "a": a, "b": b, "change": change,
                     "better": None if change is None or change == 0 else
                     (change > 0) == higher})
    return rows


DIGEST_COLUMNS = ["statement (performance_schema's digest)", "run in A", "run in B",
                  "A, ms", "B, ms", "change"]


def digest_rows(result: dict[str, Any], width: int = 90) -> list[list[str]]:
    """The statements run most, each side's mean latency as performance_schema timed it:
    which statements the change moved (none where performance_schema is off)."""
    rows = []
    for row in result.get("digests") or []:
        text = " ".join(str(row["text"]).split())
        text = text if len(text) <= width else text[:width - 1] + "…"
        a, b = row["latency_ms"]["a"], row["latency_ms"]["b"]
        change = {"change": None if not a or b is None else b / a - 1}
        change["better"] = None if not change["change"] else change["change"] < 0
        rows.append([text, f"{row['statements']['a']:,}", f"{row['statements']['b']:,}",
                     number(a), number(b), change_text(change)])
    return rows


def number(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "—"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.3g}"


def change_text(row: dict[str, Any]) -> str:
    if row["change"] is None:
        return "—"
    return f"{row['change']:+.1%}" + ("" if row["better"] is None else
                                      " (better)" if row["better"] else " (worse)")


def write_chart(result: dict[str, Any], path: Path) -> Path:
    """The windows over time: each window's mean statement latency and statements a second,
    as a segment over the seconds it measured, A and B coloured; the guard's moment marked."""
    fig = Figure(figsize=(9, 5.2))
    top, bottom = fig.subplots(2, 1, sharex=True)
    for window in result.get("windows") or []:
        start = window["began"] / 60
        end = (window["began"] + window["seconds"]) / 60
        colour = COLOURS[window["side"]]
        for ax, key in ((top, "latency_ms"), (bottom, "statements_per_s")):
            value = window.get(key)
            if value is not None:
                ax.plot([start, end], [value, value], color=colour, linewidth=3,
                        solid_capstyle="butt")
    tripped = result.get("guard_tripped")
    if tripped and tripped.get("crossed_at") is not None:
        for ax in (top, bottom):
            ax.axvline(tripped["crossed_at"] / 60, color="#222222", linestyle="--",
                       linewidth=1)
    top.set_ylabel("latency, ms")
    bottom.set_ylabel("statements a second")
    bottom.set_xlabel("minutes since the verify began")
    for ax in (top, bottom):
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
    top.legend(handles=[Patch(color=COLOURS[s], label=LABELS[s]) for s in ("A", "B")],
               loc="upper right", fontsize=8)
    top.set_title(f"{result.get('server', 'the server')}, under its own load: each window",
                  fontsize=10)
    fig.tight_layout()
    return save_figure(fig, path)


def verify_document(result: dict[str, Any], charts: list[Path], spec: str,
                    command: str) -> Document:
    """The report's document: the question, the answer, the figures, the windows."""
    figures = [[row["figure"], number(row["a"]), number(row["b"]), change_text(row)]
               for row in figure_rows(result)]
    windows = [[str(w["pair"] + 1), LABELS[w["side"]], f"{w['began']:.0f} s",
                number(w.get("latency_ms")), number(w.get("statements_per_s")),
                number(w.get("pool_reads_per_statement"))]
               for w in result.get("windows") or []]
    digests = digest_rows(result)
    settings = ", ".join(f"{k} = {v}" for k, v in (result.get("verified") or {}).items())
    own = ", ".join(f"{k} = {v}" for k, v in (result.get("production") or {}).items())
    safety = [f"every setting changed was put back: {result['put_back']}"
              if result.get("put_back") else "nothing was left changed"]
    safety += [f"not verified live: {name} ({why})"
               for name, why in (result.get("not_verified") or {}).items()]
    tripped = result.get("guard_tripped")
    if tripped:
        safety.append(f"the guard put production's own values back: {tripped['said']}; B "
                      f"was in force {tripped['seconds_after_crossing']:.1f} s after the "
                      "bound was crossed")
    claim = result.get("claim")
    evidence = ["The deciding figure is the mean statement latency by Little's law: "
                "Threads_running averaged over a window, over its statements a second "
                "(knoblab's own reading of the counters taken out of both)."]
    if digests:
        evidence.append("performance_schema is on: the statements' own latency, as it timed "
                        "them (knoblab's own readings left out), is shown beside Little's "
                        "law's, and by digest.")
    if claim:
        evidence.append(f"The sandbox claimed {claim['ratio']:.2f}× [{claim['low']:.2f}×, "
                        f"{claim['high']:.2f}×] at {claim['confidence']:.1%}: "
                        f"{result.get('against_claim')} on production.")
    return Document(
        title=f"{result.get('server', 'server')}: a recommendation verified under its own load",
        question=(f"Does {settings} make {result.get('server')} faster under its own load, "
                  f"against its own {own}, and by as much as the sandbox claimed?"),
        partial=None if result.get("stopped") in (VerifyStop.DECIDED, VerifyStop.TIME,
                                                  VerifyStop.GUARD) else
        f"it stopped early ({result.get('stopped')})",
        conclusion=str(result.get("said") or ""), recommended="",
        tables=[table("A against B, the means of their windows",
                      ["figure", LABELS["A"], LABELS["B"], "change"], figures,
                      [False, True, True, True]),
                *([table("The statements run most, as performance_schema timed them",
                         DIGEST_COLUMNS, digests, [False, True, True, True, True, True])]
                  if digests else []),
                table("The windows, in the order they were measured",
                      ["pair", "configuration", "began", "latency, ms", "statements a second",
                       "pages read per statement"], windows,
                      [True, False, True, True, True, True])],
        charts=[Chart(path, "each window's figures over time, A and B coloured")
                for path in charts],
        evidence=evidence, safety=safety, noise=[], warnings=[],
        reproduce=[("run", str(result.get("run"))), ("from", str(result.get("from")))],
        spec=spec, command=command)
