"""What is recommended, and why each setting is in it: the one place that answers "why is this
setting in my.cnf". A configuration is recommended only when its validation showed it better
than the baseline (knoblab.search.proof); its settings are the validated candidate's, reduced
to the ones shown to matter when the reduced configuration was shown to do as well.

The settings a run has in force also include the [tie] followers of the leaders it sets
(`ties`): the search's trials, its checks and what it recommends read them from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from knoblab.records import TuneResult, Validation
    from knoblab.spec import Spec


def recommended(validations: list[Validation]) -> Validation | None:
    """The validated candidate with the largest gain shown significant, if any is."""
    better = [v for v in validations if v.verdict == "better"]
    return max(better, key=lambda v: v.gain or 0.0, default=None)


def settings(result: TuneResult) -> dict[str, str]:
    """The settings recommended: the validated candidate's, reduced where that was shown to
    lose nothing; none when no candidate was shown better than the baseline."""
    chosen = recommended(result.validations)
    if chosen is None:
        return {}
    if result.reduction is not None and result.reduction.equivalent:
        return dict(result.reduction.kept)
    return dict(chosen.trial.changes)


def ties(spec: Spec, base: Mapping[str, Any], steps: list[dict[str, str]]) -> dict[str, str]:
    """The spec's [tie] entries whose leader this run sets: a trial that leaves the leader at
    the baseline's value leaves its follower there too."""
    def name(written: str) -> str:
        return written.strip().lower().replace("-", "_")

    set_here = {name(k) for k in base} | {name(k) for step in steps for k in step}
    return {follower: leader for follower, leader in spec.tied.items()
            if name(leader) in set_here}
