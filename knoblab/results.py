"""The results of a run, assembled from the store's read side: the dict behind every report.

Its shape is the results JSON of the design notes (run_id, kind, objective, server, points with
settings/effective/n/median/ci95/verdict, conclusion) plus the evidence each point carries.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from knoblab import stats
from knoblab.store import Store


def build_results(store: Store, run_id: str) -> dict[str, Any]:
    run = store.run(run_id)
    info = run["info"]
    point_list = store.points(run["id"])
    by_point: dict[int, list] = defaultdict(list)
    for trial in store.trials(run["id"]):
        by_point[trial.point_idx].append(trial)
    statistics = info.get("statistics", {})
    samples = {
        idx: [t.value for t in by_point[idx] if t.status == "done" and t.value is not None]
        for idx in range(len(point_list))
    }
    judgement = stats.judge(
        samples, direction="minimize", min_effect=statistics.get("min_effect", 0.03),
        alpha=statistics.get("alpha", 0.05), test=statistics.get("test", "welch-log"),
        confidence=statistics.get("confidence", 0.95), seed=statistics.get("seed", 0),
    )
    defaults = info.get("defaults", {})
    points = []
    for idx, (requested, config) in enumerate(point_list):
        verdict = judgement.verdicts[idx]
        done = [t for t in by_point[idx] if t.status == "done"]
        failed = [t for t in by_point[idx] if t.status == "failed"]
        summary = verdict.summary
        regimes = Counter(t.details.get("regime") for t in done if t.details.get("regime"))
        points.append({
            "settings": requested,
            "config": config,
            "effective": _effective(done, list(requested)),
            "is_default": bool(defaults) and all(defaults.get(k) == v for k, v in config.items()),
            "n": len(done),
            "failed": len(failed),
            "median": summary.median if summary else None,
            "ci95": [summary.ci_low, summary.ci_high] if summary else None,
            "mean": summary.mean if summary else None,
            "stdev": summary.stdev if summary else None,
            "samples": [t.value for t in done],
            "ratio_to_best": verdict.ratio_to_best,
            "p_value": verdict.p_adjusted,
            "verdict": verdict.verdict,
            "regime": regimes.most_common(1)[0][0] if regimes else None,
            "cpu_share": _mean(t.details.get("cpu_share") for t in done),
            "iowait_share": _mean(t.details.get("iowait_share") for t in done),
            "read_mb": _mean((t.details.get("read_bytes") or 0) / 1e6 for t in done),
            "errors": sorted({t.error for t in failed if t.error}),
        })
    result = {
        "run_id": run["id"],
        "name": run["name"],
        "kind": run["kind"],
        "status": run["status"],
        "objective": {"metric": "seconds", "direction": "minimize"},
        "server": {"binary": run["server_binary"], "version": run["server_version"]},
        "workload": info.get("workload", {}),
        "dataset": info.get("dataset", {}),
        "knobs": info.get("knobs", []),
        "base": info.get("base", {}),
        "regime": _overall_regime(points),
        "statistics": {"test": judgement.test, "alpha": judgement.alpha,
                       "min_effect": judgement.min_effect,
                       "confidence": statistics.get("confidence", 0.95)},
        "points": points,
        "noise": _noise([t for trials in by_point.values() for t in trials if t.status == "done"]),
        "warnings": _warnings(points),
    }
    best = points[judgement.best]["settings"] if judgement.best is not None else None
    result["conclusion"] = {
        "significant": judgement.significant,
        "best": best,
        "recommended": _recommended(points, judgement),
        "text": "",
    }
    from knoblab.report import conclusion_text  # presentation lives in report

    result["conclusion"]["text"] = conclusion_text(result)
    return result


def _effective(done: list, knobs: list[str]) -> dict[str, str]:
    """The value the server applied; if starts disagreed (they should not), all of them."""
    values: dict[str, list[str]] = {}
    for trial in done:
        for name in knobs:
            value = trial.effective.get(name)
            if value is not None and value not in values.setdefault(name, []):
                values[name].append(value)
    return {name: " / ".join(v) for name, v in values.items()}


def _recommended(points: list[dict], judgement: stats.Judgement) -> dict[str, str] | None:
    """The default when it is among the best (no change needed), else the best point."""
    if judgement.best is None:
        return None
    for point in points:
        if point["is_default"] and point["verdict"] in ("best", "indistinguishable"):
            return point["settings"]
    if not judgement.significant:
        return None  # nothing measurably better: keep what is configured now
    return points[judgement.best]["settings"]


def _overall_regime(points: list[dict]) -> str | None:
    regimes = {p["regime"] for p in points if p["regime"]}
    if not regimes:
        return None
    return regimes.pop() if len(regimes) == 1 else "mixed"


def _warnings(points: list[dict]) -> list[str]:
    warnings = []
    live = [p for p in points if p["n"]]
    knobs = list(live[0]["settings"]) if live else []
    for name in knobs:
        applied = {p["effective"].get(name) for p in live}
        if len(live) > 1 and len(applied) == 1:
            warnings.append(f"the server applied the same {name} ({applied.pop()}) for every "
                            "value: this sweep measures noise")
    return warnings


def _noise(done: list) -> dict[str, Any] | None:
    """How much identical timed runs on one server start differ: the machine's noise floor."""
    spreads = []
    for trial in done:
        runs = trial.details.get("runs") or []
        if len(runs) > 1 and min(runs) > 0:
            spreads.append(max(runs) / min(runs) - 1)
    if not spreads:
        return None
    spreads.sort()
    return {"starts": len(spreads), "spread_median": round(spreads[len(spreads) // 2], 4),
            "spread_max": round(spreads[-1], 4)}


def _mean(values: Any) -> float | None:
    items = [v for v in values if v is not None]
    return round(sum(items) / len(items), 4) if items else None
