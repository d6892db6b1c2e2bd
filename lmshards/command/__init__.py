"""The `lmshards` command: its entry point, the demo and the report page."""
