"""Servers under test: sandboxes knoblab starts itself (an external target comes later)."""
