"""Errors on user input. Each message names the bad value and how to fix it."""


class LmshardsError(Exception):
    """Base class for errors a user can fix; the CLI prints the message without a traceback."""


class TokenizerError(LmshardsError):
    """The tokenizer path is missing, unreadable or not a tokenizer."""


class ManifestError(LmshardsError):
    """The manifest is missing, corrupt or does not describe a complete output."""


class StorageError(LmshardsError):
    """A gs:// bucket cannot be reached in time, does not exist, or refuses these credentials."""


class OutputError(LmshardsError):
    """The output location is a file, not empty, not writable, or overlaps an input."""
