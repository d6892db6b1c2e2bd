"""The tool version recorded in every manifest and run summary."""

__version__ = "0.6.0"
