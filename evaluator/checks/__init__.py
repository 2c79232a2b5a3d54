"""Families of correctness checks; each returns a CheckFailure or None."""
