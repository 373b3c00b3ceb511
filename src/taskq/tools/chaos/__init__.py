"""The chaos run: many tasks through worker crashes, pauses and Redis restarts."""
