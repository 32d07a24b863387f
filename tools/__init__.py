"""Maintenance tools run from a source checkout (not installed with the harness)."""
