"""The change feed: resumable reads of a queue's event log, shared by many clients."""
