"""Encryption at rest for credential material (Fernet: AES-128-CBC + HMAC-SHA256).

Keys come from NOETL_STREAM_SECRET_KEY (one or more Fernet keys, comma-separated) or, when that is
unset, from `<NOETL_STREAM_HOME>/secret.key` (one key per line), which is created with mode 0600 the
first time something is encrypted. The first key encrypts; every key decrypts, so a key is rotated
by putting a new one first, re-encrypting (`noetl-stream credential rotate-key`), then dropping the
old one. Processes that share credentials (a CLI and remote workers) must share the key.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from noetl_stream.errors import CredentialError

ENV_SECRET_KEY = "NOETL_STREAM_SECRET_KEY"
KEY_FILE_NAME = "secret.key"

log = logging.getLogger("noetl_stream.state.crypto")

GENERATE_HINT = ('make one with: python -c "from cryptography.fernet import Fernet; '
                 'print(Fernet.generate_key().decode())"')


def generate_key() -> str:
    return Fernet.generate_key().decode()


def _parse_keys(text: str, origin: str) -> list[Fernet]:
    keys: list[Fernet] = []
    for n, raw in enumerate(text.replace(",", "\n").splitlines(), start=1):
        raw = raw.strip()
        if not raw or raw.startswith("#"):
            continue
        try:
            keys.append(Fernet(raw.encode()))
        except ValueError:
            # Never echo the text: it is meant to be a secret.
            raise CredentialError(f"{origin}: key {n} is not a Fernet key (32 url-safe base64 "
                                  f"bytes); {GENERATE_HINT}") from None
    return keys


class SecretBox:
    """Encrypts and decrypts small values with the configured keys, loaded on first use.

    Loading is lazy so a process that never touches a credential never creates a key file.
    """

    def __init__(self, home: Path, *, key: str | None = None) -> None:
        self.home = home
        self._explicit = key
        self._fernet: MultiFernet | None = None

    @classmethod
    def from_env(cls, home: Path) -> SecretBox:
        return cls(home, key=os.environ.get(ENV_SECRET_KEY) or None)

    @property
    def key_file(self) -> Path:
        return self.home / KEY_FILE_NAME

    @property
    def key_origin(self) -> str:
        return ENV_SECRET_KEY if self._explicit else str(self.key_file)

    def _load(self, *, create: bool) -> MultiFernet:
        if self._fernet is not None:
            return self._fernet
        if self._explicit:
            keys = _parse_keys(self._explicit, ENV_SECRET_KEY)
        else:
            keys = self._read_key_file(create=create)
        if not keys:
            raise CredentialError(f"no encryption key: set {ENV_SECRET_KEY} or create "
                                  f"{self.key_file}; {GENERATE_HINT}")
        self._fernet = MultiFernet(keys)
        return self._fernet

    def _read_key_file(self, *, create: bool) -> list[Fernet]:
        path = self.key_file
        if not path.exists():
            if not create:
                return []
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                # O_EXCL: two processes starting at once must not write two different keys.
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                pass
            else:
                with os.fdopen(fd, "w") as fh:
                    fh.write(generate_key() + "\n")
                log.info("created encryption key %s (mode 0600)", path)
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            log.warning("encryption key %s is readable by others (mode %o); chmod 600 it", path, mode)
        return _parse_keys(path.read_text(), str(path))

    def encrypt(self, plaintext: bytes) -> str:
        return self._load(create=True).encrypt(plaintext).decode()

    def decrypt(self, token: str) -> bytes:
        try:
            return self._load(create=False).decrypt(token.encode())
        except InvalidToken:
            raise CredentialError(f"cannot decrypt with the key from {self.key_origin}: it is not "
                                  "the key this value was encrypted with") from None

    def rotate(self, token: str) -> str:
        """Re-encrypt `token` with the first key (it may have been encrypted with any key)."""
        try:
            return self._load(create=True).rotate(token.encode()).decode()
        except InvalidToken:
            raise CredentialError(f"cannot decrypt with the key from {self.key_origin}: it is not "
                                  "the key this value was encrypted with") from None
