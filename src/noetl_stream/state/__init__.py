"""State kept in NATS KV: credentials (encrypted at rest) and the auth cache."""
