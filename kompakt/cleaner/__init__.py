"""The log cleaner: process-based compaction of the filthiest log (see DESIGN.md, issue 5)."""
from kompakt.cleaner.log_cleaner import LogCleaner

__all__ = ["LogCleaner"]
