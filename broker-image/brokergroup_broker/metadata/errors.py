"""Why a metadata change or a metadata document was refused (nothing changed)."""

from __future__ import annotations


class MetadataError(Exception):
    """Base of the metadata package's refusals."""


class BadMetadata(MetadataError, ValueError):
    """A config or a table document breaks a rule (a request's body, a peer's snapshot, a
    file): the message names the field and the rule."""


class MetadataFull(MetadataError):
    """A new entry would pass a bound (`MetadataBounds`); nothing changed."""


class MetadataWriteFailed(MetadataError):
    """The table could not be written durably; memory still holds the previous table."""
