"""The SSE frame parser the remote CLI reads event streams with: frames cut anywhere in the byte
stream, comments, CRLF lines, multi-line data, and ids that carry over to later frames."""

from __future__ import annotations

from noetl_stream.cli.remote import RemoteError, SseEvent, SseParser

STREAM = (b"id: 41\nevent: execution.started\ndata: {\"a\": 1}\n\n"
          b": keepalive\n\n"
          b"id: 42\r\nevent: step.done\r\ndata: {\"b\":\r\ndata: 2}\r\n\r\n"
          b"data: no id of its own\n\n")
FRAMES = [SseEvent("41", "execution.started", '{"a": 1}'),
          SseEvent("42", "step.done", '{"b":\n2}'),
          SseEvent("42", "message", "no id of its own")]


def test_sse_parser_reads_whole_stream_into_frames() -> None:
    assert SseParser().feed(STREAM) == FRAMES


def test_sse_parser_gives_the_same_frames_whatever_the_chunking() -> None:
    for size in (1, 2, 3, 7, 64):
        parser = SseParser()
        frames = []
        for start in range(0, len(STREAM), size):
            frames += parser.feed(STREAM[start:start + size])
        assert frames == FRAMES, size


def test_sse_parser_holds_back_a_frame_until_its_blank_line() -> None:
    parser = SseParser()
    assert parser.feed(b"id: 1\nevent: x\ndata: {}\n") == []
    assert parser.feed(b"\n") == [SseEvent("1", "x", "{}")]
    assert SseEvent("1", "x", '{"k": [1]}').json() == {"k": [1]}


def test_remote_error_names_the_status_and_the_servers_message() -> None:
    assert str(RemoteError(404, "not_found", 'execution "x" not found')) == \
        'server answered 404 not_found: execution "x" not found'
    unauthenticated = RemoteError(401, "unauthorized", "bad token")
    assert str(unauthenticated) == ("not authenticated: pass --token or set NOETL_STREAM_TOKEN "
                                    "(server answered 401: bad token)")
    assert unauthenticated.exit_code == 2
    refused = RemoteError(401, "unauthorized", "bad token", token_sent=True)
    assert str(refused) == ("token refused: the server does not accept the token given (--token "
                            "or NOETL_STREAM_TOKEN); it is unknown, expired or revoked (server "
                            "answered 401: bad token)")
    assert refused.exit_code == 2
    assert RemoteError(503, "error", "down").exit_code == 3
    rejected = RemoteError(422, "rejected", "the server rejected the playbook",
                           {"execution_id": "e", "errors": ["x.yaml:3: bad"]})
    assert rejected.reasons() == ["x.yaml:3: bad"]
    invalid = RemoteError(422, "invalid_playbook", "invalid", [{"text": "<request>:9: bad kind"}])
    assert invalid.reasons() == ["<request>:9: bad kind"]
