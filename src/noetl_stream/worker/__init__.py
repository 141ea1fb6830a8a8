"""The worker process: the command consumer (worker.py), the task pipeline and what only it runs
(attempt claims, credential scopes and keychain, cursors, sinks, task inputs and views). It
imports nothing of server/ and nothing of router/.
"""
