"""The results of a run, assembled from the store's read side: the dict behind every report.

Its shape is the results JSON of the design notes (run_id, kind, objective, server, points with
settings/effective/n/median/ci95/verdict, conclusion) plus the evidence each point carries.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import numpy as np
from scipy import stats as scipy_stats

from knoblab import evidence, safety, stats, timeseries
from knoblab.report import conclusion_text
from knoblab.store import Store


def build_results(store: Store, run_id: str) -> dict[str, Any]:
    run = store.run(run_id)
    info = run["info"]
    point_list = store.points(run["id"])
    by_point: dict[int, list] = defaultdict(list)
    for trial in store.trials(run["id"]):
        by_point[trial.point_idx].append(trial)
    statistics = info.get("statistics", {})
    time_series = info.get("workload", {}).get("kind") == "sysbench"
    # Thread counts and dataset variants are compared within themselves: the best setting may
    # differ per thread count or data size, and times at 1M and 4M rows are not comparable.
    # Several servers: each is judged on its own (a setting may suit one build and not
    # another); the servers are then compared with each other configuration by configuration.
    slice_keys = ("binary", "threads") if time_series else ("binary", "rows", "engine",
                                                             "slack_type")
    slices = [k for k in slice_keys if point_list and k in point_list[0][0]]
    steps_info = info.get("steps") or [None] * len(point_list)
    unavailable = {int(i): why for i, why in (info.get("unavailable") or {}).items()}
    if time_series:
        seconds, os_seconds = store.seconds(run["id"]), store.os_seconds(run["id"])
        evidence = {idx: _series_evidence(by_point[idx], seconds, os_seconds, statistics)
                    for idx in range(len(point_list))}
        samples = {idx: evidence[idx]["samples"] for idx in evidence}
    else:
        samples = {idx: [t.value for t in by_point[idx] if t.status == "done"]
                   for idx in range(len(point_list))}
    direction = "maximize" if time_series else "minimize"
    verdicts, judgements = _judge_slices(samples, point_list, slices, direction, statistics)
    defaults = info.get("defaults", {})
    points = []
    for idx, (requested, config) in enumerate(point_list):
        verdict = verdicts[idx]
        done = [t for t in by_point[idx] if t.status == "done"]
        failed = [t for t in by_point[idx] if t.status == "failed"]
        point = {
            "settings": requested,
            "config": config,
            "effective": _effective(done, list(config)),
            "is_default": bool(defaults) and all(defaults.get(k) == v for k, v in config.items()),
            "n": len(done),
            "failed": len(failed),
            "ratio_to_best": verdict.ratio_to_best,
            "p_value": verdict.p_adjusted,
            "verdict": verdict.verdict,
            "errors": sorted({t.error for t in failed if t.error}) +
            ([unavailable[idx]] if idx in unavailable else []),
            "unavailable": unavailable.get(idx),
            # What a crash could cost with this point's settings: shown on a line of its own.
            "durability": safety.durability_costs({**info.get("base", {}), **config}),
        }
        if steps_info[idx] is not None:
            step = steps_info[idx]
            point.update(step=step["step"], role=step["role"], change=step["change"],
                         label=step["label"])
        if time_series:
            point.update(evidence[idx])
        else:
            point.update(_timing_evidence(done, verdict.summary))
        points.append(point)
    result = {
        "run_id": run["id"],
        "name": run["name"],
        "kind": run["kind"],
        "status": run["status"],
        "objective": {"metric": "tps" if time_series else "seconds", "direction": direction},
        "server": {"binary": run["server_binary"], "version": run["server_version"]},
        "servers": info.get("servers") or [{
            "label": "", "binary": run["server_binary"], "version": run["server_version"],
            "compile": {}, "missing": [], "error": None}],
        "workload": info.get("workload", {}),
        "dataset": info.get("dataset", {}),
        "steady": info.get("steady"),
        "knobs": list(point_list[0][0]) if point_list else [],
        "slices": slices,
        "base": info.get("base", {}),
        "regime": _overall_regime(points),
        "statistics": {"test": statistics.get("test", "welch-log"),
                       "alpha": statistics.get("alpha", 0.05),
                       "min_effect": statistics.get("min_effect", 0.03),
                       "confidence": statistics.get("confidence", 0.95)},
        "points": points,
        "noise": _noise([t for trials in by_point.values() for t in trials if t.status == "done"]),
        "explained_by": _explanations(by_point, point_list, slices, steps_info),
        "tied": info.get("tied", {}),
        "warnings": list(info.get("warnings") or []) + _warnings(points),
    }
    if run["kind"] == "steps":
        result["steps"] = _steps(points, samples, slices, direction, _centre(direction),
                                 statistics)
    if "binary" in slices:
        result["servers_compared"] = _servers_compared(points, samples, run["kind"],
                                                       direction, statistics)
    result["conclusion"] = _conclusion(points, judgements, slices)
    if run["kind"] == "steps":
        result["conclusion"]["recommended_steps"] = [
            {"slice": part["slice"], "settings": _recommended_steps(part)}
            for part in result["steps"]]
    result["conclusion"]["text"] = conclusion_text(result)
    return result


SliceJudgement = tuple[dict[str, str], list[int], stats.Judgement]


def _judge_slices(samples: dict[int, list[float]], point_list: list, slices: list[str],
                  direction: str, statistics: dict[str, Any]
                  ) -> tuple[dict[int, stats.Verdict], list[SliceJudgement]]:
    """Verdicts judged within each slice (all points form one slice when there are none)."""
    groups: dict[tuple, list[int]] = defaultdict(list)
    for idx, (requested, _) in enumerate(point_list):
        groups[tuple(requested[k] for k in slices)].append(idx)
    verdicts: dict[int, stats.Verdict] = {}
    judgements = []
    for key, members in groups.items():
        judgement = _judge(samples, members, direction, statistics)
        verdicts.update({v.key: v for v in judgement.verdicts})
        judgements.append((dict(zip(slices, key, strict=True)), members, judgement))
    return verdicts, judgements


def _judge(samples: dict[int, list[float]], members: list[int], direction: str,
           statistics: dict[str, Any]) -> stats.Judgement:
    """The run's statistics settings applied to some of its points: the best and the rest."""
    return stats.judge(
        {idx: samples[idx] for idx in members}, direction=direction,
        min_effect=statistics.get("min_effect", 0.03), alpha=statistics.get("alpha", 0.05),
        test=statistics.get("test", "welch-log"),
        confidence=statistics.get("confidence", 0.95), seed=statistics.get("seed", 0),
        center=_centre(direction),
    )


def _centre(direction: str) -> str:
    """Times are judged on medians; throughput on the mean of per-start means."""
    return "mean" if direction == "maximize" else "median"


def _conclusion(points: list[dict], judgements: list[SliceJudgement],
                slices: list[str]) -> dict[str, Any]:
    parts = []
    for slice_values, members, judgement in judgements:
        group = [points[i] for i in members]
        parts.append({
            "slice": slice_values,
            "significant": judgement.significant,
            "best": points[judgement.best]["settings"] if judgement.best is not None else None,
            "recommended": _recommended(group, judgement.significant,
                                        None if judgement.best is None else points[judgement.best]),
        })
    if not slices:
        return {**{k: v for k, v in parts[0].items() if k != "slice"}, "text": ""} if parts \
            else {"significant": False, "best": None, "recommended": None, "text": ""}
    # Several slices: no single best; each slice has its own.
    return {"significant": any(p["significant"] for p in parts), "best": None,
            "recommended": None, "by_slice": parts, "text": ""}


def _timing_evidence(done: list, summary: stats.Summary | None) -> dict[str, Any]:
    regimes = Counter(t.details.get("regime") for t in done if t.details.get("regime"))
    return {
        "median": summary.median if summary else None,
        "ci95": [summary.ci_low, summary.ci_high] if summary else None,
        "mean": summary.mean if summary else None,
        "stdev": summary.stdev if summary else None,
        "samples": [t.value for t in done],
        "regime": regimes.most_common(1)[0][0] if regimes else None,
        "cpu_share": _mean(t.details.get("cpu_share") for t in done),
        "iowait_share": _mean(t.details.get("iowait_share") for t in done),
        "read_mb": _mean((t.details.get("read_bytes") or 0) / 1e6 for t in done),
        "os": {
            "disk_read_mb": _median((t.details.get("os") or {}).get("disk_read_bytes", 0) / 1e6
                                    for t in done),
            "disk_write_mb": _median((t.details.get("os") or {}).get("disk_write_bytes", 0) / 1e6
                                     for t in done),
            **{name: _median((t.details.get("os") or {}).get(name) for t in done)
               for name in ("cpu_user", "cpu_system", "cpu_iowait")},
        },
    }


def _series_evidence(trials: list, seconds: dict[int, list[dict]],
                     os_seconds: dict[int, list[dict]],
                     statistics: dict[str, Any]) -> dict[str, Any]:
    """Steady-state throughput of a point's trials, pooled, with its batch means for the test."""
    series, windows = [], []
    os_series = [{"repetition": t.repetition,
                  **{name: [row[name] for row in os_seconds[t.id]]
                     for name in ("t", "cpu_user", "cpu_system", "cpu_iowait",
                                  "disk_read_bytes", "disk_write_bytes")}}
                 for t in trials if os_seconds.get(t.id)]
    for trial in trials:
        if trial.status not in ("done", "failed"):
            continue
        rows = seconds.get(trial.id, [])
        steady = trial.details.get("steady") or {}
        window = [steady.get("start", 0), steady.get("end", len(rows))]
        series.append({"repetition": trial.repetition, "status": trial.status,
                       "t": [r["t"] for r in rows], "tps": [r["tps"] for r in rows],
                       "steady": window})
        if trial.status == "done" and rows:
            windows.append([r["tps"] for r in rows][window[0]:window[1]])
    done = [t for t in trials if t.status == "done"]
    evidence: dict[str, Any] = {"series": series, "os_series": os_series, "samples": [],
                                "regime": None}
    if not windows:
        return {**evidence, "mean": None, "median": None, "stdev": None, "cv": None,
                "ci95": None, "latency_p95_ms": None, "latency_p99_ms": None,
                "stall_seconds": 0, "zero_seconds": 0, "longest_stall": 0, "sql_errors": 0,
                "reconnects": 0}
    pooled = np.concatenate([np.asarray(w, dtype=float) for w in windows])
    size = max(timeseries.batch_size(w) for w in windows)
    batches = [m for w in windows for m in timeseries.batch_means(w, size)] or \
        [float(np.mean(w)) for w in windows]
    # The unit of replication is the server start: starts differ by a few percent, so seconds
    # (or batches) of one start are not independent samples of the configuration. With one
    # start per value only batch means remain, and they compare runs, not configurations.
    starts = [float(np.mean(w)) for w in windows]
    samples = starts if len(starts) >= 2 else batches
    mean = float(np.mean(samples))  # what the test compares and the interval is about
    stdev = float(pooled.std(ddof=1)) if pooled.size > 1 else 0.0
    steadies = [t.details.get("steady", {}) for t in done]
    return {
        **evidence,
        "samples": samples,
        "compared": "server starts" if len(starts) >= 2 else "batch means of one start",
        "mean": mean,
        "median": float(np.median(pooled)),
        "stdev": stdev,
        "cv": stdev / mean if mean else None,
        # Throughput cannot be negative, whatever a t-interval on two starts says.
        "ci95": [max(0.0, bound) for bound in
                 _mean_interval(samples, statistics.get("confidence", 0.95))],
        "latency_p95_ms": _median(t.details.get("latency_p95_ms") for t in done),
        "latency_p99_ms": _median(t.details.get("latency_p99_ms") for t in done),
        "stall_seconds": sum(s.get("stall_seconds", 0) for s in steadies),
        "zero_seconds": sum(s.get("zero_seconds", 0) for s in steadies),
        "longest_stall": max((s.get("longest_stall", 0) for s in steadies), default=0),
        "sql_errors": round(sum(t.details.get("errors", 0) for t in done)),
        "reconnects": round(sum(t.details.get("reconnects", 0) for t in done)),
    }


def _mean_interval(batches: list[float], confidence: float) -> list[float]:
    """t-interval of the mean from batch means (near-independent, unlike the raw seconds)."""
    k = len(batches)
    mean = float(np.mean(batches))
    if k < 2:
        return [mean, mean]
    half = float(scipy_stats.t.ppf((1 + confidence) / 2, k - 1) * np.std(batches, ddof=1)
                 / np.sqrt(k))
    return [mean - half, mean + half]


def _median(values: Any) -> float | None:
    items = [v for v in values if v is not None]
    return float(np.median(items)) if items else None


def _effective(done: list, knobs: list[str]) -> dict[str, str]:
    """The value the server applied; if starts disagreed (they should not), all of them."""
    values: dict[str, list[str]] = {}
    for trial in done:
        for name in knobs:
            value = trial.effective.get(name)
            if value is not None and value not in values.setdefault(name, []):
                values[name].append(value)
    return {name: " / ".join(v) for name, v in values.items()}


def _recommended(points: list[dict], significant: bool,
                 best: dict | None) -> dict[str, str] | None:
    """The default when it is among the best (no change needed), else the best point."""
    if best is None:
        return None
    for point in points:
        if point["is_default"] and point["verdict"] in ("best", "indistinguishable"):
            return point["settings"]
    if not significant:
        return None  # nothing measurably better: keep what is configured now
    return best["settings"]


def _overall_regime(points: list[dict]) -> str | None:
    regimes = {p["regime"] for p in points if p["regime"]}
    if not regimes:
        return None
    return regimes.pop() if len(regimes) == 1 else "mixed"


def _warnings(points: list[dict]) -> list[str]:
    warnings = []
    if any(p.get("compared") == "batch means of one start" for p in points):
        warnings.append("some values ran on a single server start: their tests compare runs, "
                        "and a difference between starts (often a few percent) is not "
                        "separated from the setting's effect; use repetitions >= 2")
    live = [p for p in points if p["n"]]
    knobs = list(live[0]["config"]) if live else []
    for name in knobs:
        applied = {p["effective"].get(name) for p in live}
        if len(live) > 1 and len(applied) == 1:
            warnings.append(f"the server applied the same {name} ({applied.pop()}) for every "
                            "value: this sweep measures noise")
    return warnings


def _explanations(by_point: dict[int, list], point_list: list, slices: list[str],
                  steps_info: list[dict | None]) -> list[dict[str, Any]]:
    """Per slice, the server counters that moved with the setting, consistently, in words."""
    groups: dict[tuple, list[int]] = defaultdict(list)
    for idx, (requested, _) in enumerate(point_list):
        groups[tuple(requested[k] for k in slices)].append(idx)
    found_by_slice = []
    for key, members in groups.items():
        measurements = [(idx, t.value, t.details.get("status") or {})
                        for idx in members for t in by_point[idx]
                        if t.status == "done" and t.value is not None]
        if len({idx for idx, _, _ in measurements}) < 2:
            continue
        labels = {idx: _step_name(steps_info[idx]) if steps_info[idx] else
                  ", ".join(str(v) for k, v in point_list[idx][0].items() if k not in slices)
                  for idx in members}
        counters = [{"counter": found.name,
                     "per_point": {labels[k]: v for k, v in found.per_point.items()},
                     "eta_squared": round(found.eta_squared, 3),
                     "spearman": None if found.spearman is None else round(found.spearman, 3),
                     "text": evidence.describe(found, labels.__getitem__)}
                    for found in evidence.explaining_counters(measurements)]
        found_by_slice.append({"slice": dict(zip(slices, key, strict=True)),
                               "counters": counters})
    return found_by_slice


def _step_name(step: dict) -> str:
    return f"step {step['step']}{' alone' if step['role'] == 'alone' else ''}"


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


def _change(a: list[float], b: list[float], centre: str,
            statistics: dict[str, Any]) -> dict[str, Any]:
    found = stats.compare(a, b, test=statistics.get("test", "welch-log"), center=centre,
                          confidence=statistics.get("confidence", 0.95),
                          seed=statistics.get("seed", 0))
    return {"ratio": found.ratio, "ci95": [found.ci_low, found.ci_high], "p_raw": found.p_raw,
            "p_value": None, "significant": False}


def _settle(changes: list[dict[str, Any]], statistics: dict[str, Any]) -> None:
    """Holm over one family of comparisons, then significance: p below alpha and an effect of
    at least the minimum effect."""
    for change, adjusted in zip(changes, stats.holm([c["p_raw"] for c in changes]),
                                strict=True):
        change["p_value"] = adjusted
        change["significant"] = bool(adjusted < statistics.get("alpha", 0.05) and
                                     abs(change["ratio"] - 1) >=
                                     statistics.get("min_effect", 0.03))


def _better(change: dict[str, Any], direction: str) -> bool:
    return change["ratio"] < 1 if direction == "minimize" else change["ratio"] > 1


def _steps(points: list[dict], samples: dict[int, list[float]], slices: list[str],
           direction: str, centre: str, statistics: dict[str, Any]) -> list[dict[str, Any]]:
    """The article's table per slice: every step against the previous measured step and
    against step 0, each change alone against step 0 when measured, and the total.

    All comparisons of a slice form one Holm family: a table of many steps should not call
    one of them significant by chance.
    """
    groups: dict[tuple, list[int]] = defaultdict(list)
    for idx, point in enumerate(points):
        groups[tuple(point["settings"].get(k) for k in slices)].append(idx)
    tables = []
    for key, members in groups.items():
        cumulative = sorted((i for i in members if points[i]["role"] == "cumulative"),
                            key=lambda i: points[i]["step"])
        alone = {points[i]["step"]: i for i in members if points[i]["role"] == "alone"}
        base = cumulative[0]
        family: list[dict[str, Any]] = []

        def measure(a: int, b: int, family: list = family) -> dict[str, Any] | None:
            if not samples[a] or not samples[b]:
                return None
            change = _change(samples[a], samples[b], centre, statistics)
            family.append(change)
            return change

        rows, previous = [], base
        for idx in cumulative:
            point = points[idx]
            row: dict[str, Any] = {
                "step": point["step"], "label": point["label"], "change": point["change"],
                "point": idx, "center": point.get(centre), "ci95": point.get("ci95"),
                "n": point["n"], "vs_previous": None, "vs_base": None, "alone": None,
                "verdict": "base" if idx == base else None,
                "durability": [f"{name} = {point['change'][name]}: {cost}" for name, cost
                               in safety.durability_costs(point["config"]).items()
                               if name in point["change"]],
                "note": point["unavailable"],
            }
            if idx != base:
                if point["unavailable"]:
                    row["verdict"] = "unavailable"
                elif not samples[idx]:
                    row["verdict"] = "failed"
                else:
                    row["vs_previous"] = measure(previous, idx)
                    row["vs_base"] = measure(base, idx)
                    previous = idx
                if point["step"] in alone and samples[alone[point["step"]]]:
                    other = alone[point["step"]]
                    row["alone"] = {"point": other, "center": points[other].get(centre),
                                    "vs_base": measure(base, other)}
            rows.append(row)
        # The last measured step against step 0 is the total: the same comparison, not a
        # second one in the family.
        total = next((r["vs_base"] for r in reversed(rows) if r["vs_base"]), None)
        _settle(family, statistics)
        for row in rows:
            change = row["vs_previous"]
            if row["verdict"] is None and change is not None:
                row["verdict"] = "no measurable effect" if not change["significant"] else \
                    "gain" if _better(change, direction) else "loss"
            elif row["verdict"] is None:
                row["verdict"] = "failed"  # the previous step failed: nothing to compare with
        # Effects that multiply independently give a total equal to the product of the
        # effects alone; a gap is an interaction (e.g. a bigger log matters only once the
        # buffer pool is big).
        interaction = None
        measured = [r for r in rows[1:] if r["vs_base"]]
        if measured:
            alones = [measured[0]["vs_base"]] + [r["alone"] and r["alone"]["vs_base"]
                                                 for r in measured[1:]]
            if total is not None and len(measured) > 1 and all(alones):
                interaction = {"cumulative": total["ratio"],
                               "product_of_alone": float(np.prod([a["ratio"] for a in alones]))}
        for change in family:
            change.pop("p_raw", None)
        tables.append({"slice": dict(zip(slices, key, strict=True)), "rows": rows,
                       "total": total, "interaction": interaction})
    return tables


def _recommended_steps(table: dict[str, Any]) -> dict[str, str]:
    """The settings of the steps that measurably helped; the others are left out."""
    settings: dict[str, str] = {}
    for row in table["rows"]:
        if row["verdict"] == "gain":
            settings.update(row["change"])
    return settings


def _servers_compared(points: list[dict], samples: dict[int, list[float]],
                      kind: str, direction: str,
                      statistics: dict[str, Any]) -> list[dict[str, Any]]:
    """The servers against each other, configuration by configuration: for a steps run at
    step 0 and at the last step (the article's final comparison of builds), for a sweep at
    every point."""
    configurations: dict[tuple, list[int]] = defaultdict(list)
    for idx, point in enumerate(points):
        same = {k: v for k, v in point["settings"].items() if k != "binary"}
        key = (point.get("role"), point.get("step"), tuple(sorted(same.items())))
        configurations[key].append(idx)
    if kind == "steps":
        steps = [k for k in configurations if k[0] == "cumulative"]
        last = max(k[1] for k in steps)
        keys = [k for k in steps if k[1] in (0, last)]
    else:
        keys = list(configurations)
    compared = []
    for key in keys:
        members = [i for i in configurations[key] if not points[i]["unavailable"]]
        if len(members) < 2:
            continue
        judgement = _judge(samples, members, direction, statistics)
        first = points[members[0]]
        if kind == "steps":
            at = f"step {first['step']}: {first['label']}" if first["step"] else first["label"]
        else:
            at = ", ".join(f"{k}={v}" for k, v in first["settings"].items() if k != "binary")
        rows = []
        for verdict in judgement.verdicts:
            point = points[verdict.key]
            rows.append({"binary": point["settings"]["binary"], "point": verdict.key,
                         "center": None if verdict.summary is None
                         else getattr(verdict.summary, _centre(direction)),
                         "ci95": point.get("ci95"), "n": point["n"],
                         "ratio_to_best": verdict.ratio_to_best, "p_value": verdict.p_adjusted,
                         "verdict": verdict.verdict})
        compared.append({"at": at, "slice": {}, "rows": rows,
                         "significant": judgement.significant})
    return compared
