"""Errors a user can act on. The CLI prints them as one line (no traceback) and exits with 2."""
from __future__ import annotations


class UserFacingError(Exception):
    """Raised for a problem the user can fix: bad input, a missing or unknown saved game."""
