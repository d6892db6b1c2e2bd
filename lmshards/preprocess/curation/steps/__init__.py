"""Curation as an ordered list of steps (see base.py for what a step is)."""
