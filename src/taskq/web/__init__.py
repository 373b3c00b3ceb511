"""The HTTP side of taskq: the SSE change feed, the JSON API, metrics and the dashboard."""
