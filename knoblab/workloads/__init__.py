"""Datasets the workloads run on, and the drivers that measure them."""
