"""What every process uses to talk to NATS: the connection and its stored publishes, pull
consumers, provisioning, the embedded nats-server, heartbeats, signals and event feeds, and the
tables of what a consumer does with a message. It imports none of server/, worker/, api/, cli/.
"""
