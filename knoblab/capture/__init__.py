"""A captured workload: a server's slow or general query log read as events (`read_log`),
and each statement's class (`fingerprint`, `fingerprint_id`), for the replay to sit on."""

from knoblab.capture.fingerprint import fingerprint, fingerprint_id
from knoblab.capture.logs import STATEMENTS, Event, read_log

__all__ = ["STATEMENTS", "Event", "fingerprint", "fingerprint_id", "read_log"]
