"""cronctl: a cron for one host that never fails silently."""

__version__ = "0.1.0"
