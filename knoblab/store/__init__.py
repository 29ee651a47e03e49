"""Where every measurement goes the moment it exists: SQLite by default, any SQLAlchemy URL.

One schema (`schema`), a write side (`writing`: create a run, record each trial as it
finishes, mark the run's status) and a read side (`reading`: a run, its points and its
trials, everything reports are built from) over one connection (`base`); the rows read back
checked (`rows`), the store's address parsed and its password never shown (`urls`). A run is
resumable: its plan is derived from the stored spec and seed, and trials already stored as
done (or failed) are not repeated."""

from knoblab.store.reading import Reads
from knoblab.store.rows import Damaged, RunInfo, study_of
from knoblab.store.schema import SECOND_FIELDS, Trial
from knoblab.store.urls import (
    default_url,
    driver_url,
    hide_passwords,
    in_memory,
    names_no_database,
    parse_url,
    safe_url,
    sqlite_url,
)
from knoblab.store.writing import Writes
from knoblab.vocabulary import TrialState


class Store(Writes, Reads):
    """The results store. Every statement goes through `_tx`: a failure for a passing reason
    (another process's lock, a lost connection) is tried again for RETRY_FOR seconds, any
    other becomes one line (UserError) naming the store and what is wrong with it — never a
    password, never a traceback. Each write is its own transaction: what was stored stays."""


__all__ = ["SECOND_FIELDS", "Damaged", "RunInfo", "Store", "Trial",
           "TrialState", "default_url", "driver_url", "hide_passwords", "in_memory",
           "names_no_database", "parse_url", "safe_url", "sqlite_url", "study_of"]
