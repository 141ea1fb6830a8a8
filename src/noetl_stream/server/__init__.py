"""The server process: the shell around the pure router (server.py consumes events and commits
state) and everything only a server runs or answers for (admission, dead-letter handling is in
bus/, retention, stalls, triggers, restart, replay and verify). It imports nothing of worker/.
"""
