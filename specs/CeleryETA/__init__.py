"""The seed's Celery ETA / visibility-timeout models, in TLA+ and in Python."""
