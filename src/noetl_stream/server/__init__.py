"""The server process: the shell around the pure router (server.py consumes events and commits
state) and what only a server runs or answers for: admission, pools, partitions, retention and
stalls, triggers, and the cancel, restart, replay and verify the API and CLI ask of it. It
imports nothing of worker/.
"""
