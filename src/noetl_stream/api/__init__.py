"""The control-plane HTTP API (aiohttp): thin handlers over the NATS streams and KV buckets."""

from noetl_stream.api.app import create_app, open_authenticator, serve

__all__ = ["create_app", "open_authenticator", "serve"]
