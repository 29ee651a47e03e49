"""knoblab: measure which MySQL/MariaDB settings are best for a workload, and how sure that is."""

__version__ = "0.1.0"
