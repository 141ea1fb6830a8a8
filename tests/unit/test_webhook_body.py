"""What a payload template sees as `webhook.body` for each body type a signed webhook may carry."""

from __future__ import annotations

import pytest

from noetl_stream.api.routes_hooks import parsed_body


@pytest.mark.parametrize(("content_type", "body", "seen"), [
    ("application/json", b'{"id": "W-1", "total": 40}', {"id": "W-1", "total": 40}),
    ("application/vnd.shop+json", b"[1, 2]", [1, 2]),
    ("application/octet-stream", b'{"id": 1}', {"id": 1}),  # no type given: JSON if it parses
    ("application/octet-stream", b"raw bytes", "raw bytes"),
    ("application/json", b"{not json", "{not json"),
    ("application/x-www-form-urlencoded", b"id=F-1&total=12&tag=a&tag=b&tag=c&empty=",
     {"id": "F-1", "total": "12", "tag": ["a", "b", "c"], "empty": ""}),
    ("application/x-www-form-urlencoded", b"note=caf%C3%A9+au+lait", {"note": "café au lait"}),
    ("text/plain", b'{"looks": "like json"}', '{"looks": "like json"}'),  # its type says text
    ("text/csv", b"a,b\n1,2\n", "a,b\n1,2\n"),
    ("text/plain", b"  \n", None),
])
def test_a_body_is_parsed_as_its_type_says(content_type: str, body: bytes, seen: object) -> None:
    assert parsed_body(content_type, body) == seen
