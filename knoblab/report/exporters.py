"""Report formats, by name: the only place that lists them.

A report folder holds one file per exporter, each written from a `Report`
(knoblab.report.document): the document the page and the Markdown show, and the typed records
behind it. Adding a format: a module whose class follows `Exporter`, and its line in EXPORTERS;
what a folder may hold (knoblab.places) and the line naming what was written follow from here.
"""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import jinja2

from knoblab.errors import UserError
from knoblab.literal import code_block, literal, markdown
from knoblab.places import REPORT_MARK, check_report_folder
from knoblab.records import Results, TuneResult
from knoblab.report import definitions
from knoblab.report.document import Report, measurements_csv
from knoblab.report.shapes import CompareRow, ComparisonJSON, FastestJSON
from knoblab.report.text import conclusion_text
from knoblab.report.tuning import tune_json
from knoblab.vocabulary import PointVerdict

if TYPE_CHECKING:
    from knoblab.compare import Comparison


class Exporter(Protocol):
    """A report format: the file it writes in a report folder, and that file's content."""

    name: str  # what the format is called
    file: str  # the file's name in the folder

    def export(self, report: Report) -> str | bytes | None:
        """The file's content; None when this report has no such file (a search has no
        measurements of its own)."""


class HtmlPage:
    """report.html: one self-contained page, the charts embedded."""

    name = "html"
    file = "report.html"

    def export(self, report: Report) -> str:
        return _environment("html").get_template("report.html.j2").render(
            doc=report.document, base=definitions.manual_base(), href=definitions.href)


class MarkdownPage:
    """report.md: the same, the PNG charts beside it."""

    name = "markdown"
    file = "report.md"

    def export(self, report: Report) -> str:
        return _environment("md").get_template("report.md.j2").render(doc=report.document)


class RecommendedCnf:
    """recommended.cnf: a [mysqld] fragment with only the recommended changes."""

    name = "cnf"
    file = "recommended.cnf"

    def export(self, report: Report) -> str | None:
        return report.document.recommended or None  # a comparison recommends nothing


class MeasurementsCsv:
    """measurements.csv: a run's every measurement, its counters and OS figures as columns."""

    name = "csv"
    file = "measurements.csv"

    def export(self, report: Report) -> str | None:
        return None if report.results is None else measurements_csv(report.results,
                                                                    report.trials)


class ResultsJson:
    """result.json: a run's results for programs (as `--json FILE` writes them)."""

    name = "json"
    file = "result.json"

    def export(self, report: Report) -> str | None:
        return None if report.results is None else results_json(report.results)


class SearchJson:
    """tune.json: a search's results for programs (as `--json FILE` writes them)."""

    name = "tune-json"
    file = "tune.json"

    def export(self, report: Report) -> str | None:
        return None if report.search is None else search_json(report.search)


# In the order they are written and named: the page first.
EXPORTERS: dict[str, Exporter] = {exporter.name: exporter for exporter in (
    HtmlPage(),
    MarkdownPage(),
    RecommendedCnf(),
    MeasurementsCsv(),
    ResultsJson(),
    SearchJson(),
)}


def file_names() -> list[str]:
    """Every file a report folder may get from an exporter."""
    return [exporter.file for exporter in EXPORTERS.values()]


def claim_folder(folder: Path) -> None:
    """Make `folder` a report folder, or refuse one that holds something knoblab did not
    write (it is never written into)."""
    check_report_folder(folder, file_names())
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / REPORT_MARK).write_text("A knoblab report: knoblab may overwrite this folder.\n")
    except OSError as exc:
        raise UserError(f"cannot write the report to {exc.filename or folder}: "
                        f"{exc.strerror}; give a writable folder with --out") from None


def write(report: Report, folder: Path) -> list[Path]:
    """Every exporter's file of `report` in `folder` (claimed with claim_folder); the files
    written. Each is made before any is written: a format that fails leaves no half report."""
    made = {exporter.file: content for exporter in EXPORTERS.values()
            if (content := exporter.export(report)) is not None}
    for name, content in made.items():
        if isinstance(content, bytes):
            (folder / name).write_bytes(content)
        else:
            (folder / name).write_text(content)
    return [folder / name for name in made]


def results_json(results: Results) -> str:
    """A run's results JSON: its numbers and verdicts, and the report's sentence."""
    return json.dumps(results.to_json(conclusion_text=conclusion_text(results)), indent=2)


def search_json(result: TuneResult) -> str:
    """A search's results JSON."""
    return json.dumps(tune_json(result), indent=2)


def comparison_json(comparisons: list[Comparison]) -> str:
    """`knoblab compare --json`: each run against the first (`ComparisonJSON`)."""
    def leaders(c: Comparison) -> list[tuple[str, str | None, PointVerdict | None]]:
        return [(c.first.run_id, c.best_first, c.verdict_first),
                (c.other.run_id, c.best_other, c.verdict_other)]

    return json.dumps([ComparisonJSON(
        first=c.first.run_id, other=c.other.run_id, agree=c.agree,
        best={run: label if verdict == PointVerdict.BEST else None
              for run, label, verdict in leaders(c)},
        fastest={run: None if label is None else FastestJSON(label, verdict)
                 for run, label, verdict in leaders(c)},
        rows=[CompareRow(r.label, r.first, r.other,
                         None if r.change is None else r.change.ratio,
                         None if r.change is None else [r.change.ci_low, r.change.ci_high],
                         c.first.statistics.confidence, r.p_adjusted, r.verdict)
              for r in c.rows],
        machine=c.machine, spec=c.spec, incomplete=c.incomplete).to_json()
        for c in comparisons], indent=2)


class _Markdown(str):
    """Text that is Markdown already (a code block, a link): written as it is."""


def _environment(medium: str) -> jinja2.Environment:
    """Every value a template writes is shown literally (knoblab.literal): in the page HTML is
    escaped (a query may hold "<", a name "<script>"), in the Markdown its syntax (a name may
    hold "#", "*" or a line break)."""
    if medium == "html":
        return jinja2.Environment(
            loader=jinja2.PackageLoader("knoblab.report", "templates"), autoescape=True,
            finalize=lambda value: literal(value, lines=True),
            trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("knoblab.report", "templates"), autoescape=False,
        finalize=lambda value: value if isinstance(value, _Markdown) else markdown(value),
        trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    environment.globals.update(
        code_block=lambda text, language: _Markdown(code_block(text, language)),
        link=lambda path: _Markdown(urllib.parse.quote(path.name)))
    return environment
