"""A local stand-in for the HTTP APIs the examples call, so they run on a machine with nothing
else: `python3 playbooks/examples/stand_ins/api.py [PORT]` (default 5555) serves, on 127.0.0.1,

    GET  /api/v1/assessments?page=N&pageSize=S   25 assessments, paged, with {"data", "paging"}
    POST /jobs                                   503 on every other call (to show retries), else
                                                 201 {"id", "status": "pending"}
    GET  /jobs/<id>                              "pending" on the first poll, "ready" after

Standard library only. Ctrl-C stops it.
"""

from __future__ import annotations

import itertools
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

ASSESSMENTS = [{"id": n, "score": (n * 37) % 100} for n in range(1, 26)]
_posts = itertools.count(1)
_polls: dict[str, int] = {}


class StandIn(BaseHTTPRequestHandler):
    def _answer(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        url = urlsplit(self.path)
        if url.path == "/api/v1/assessments":
            query = parse_qs(url.query)
            page = max(1, int(query.get("page", ["1"])[0]))
            size = max(1, int(query.get("pageSize", ["10"])[0]))
            chunk = ASSESSMENTS[(page - 1) * size: page * size]
            more = page * size < len(ASSESSMENTS)
            self._answer(200, {"data": chunk,
                               "paging": {"page": page, "pageSize": size, "hasMore": more}})
        elif url.path.startswith("/jobs/"):
            job = url.path.removeprefix("/jobs/")
            _polls[job] = _polls.get(job, 0) + 1
            self._answer(200, {"id": job, "status": "ready" if _polls[job] > 1 else "pending"})
        else:
            self._answer(404, {"error": f"no route {url.path}"})

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        if urlsplit(self.path).path != "/jobs":
            self._answer(404, {"error": "no such route"})
            return
        call = next(_posts)
        if call % 2:
            self._answer(503, {"error": "busy, try again"})
        else:
            self._answer(201, {"id": f"job-{call // 2}", "status": "pending"})

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base's name
        sys.stderr.write(f"stand-in api: {format % args}\n")


def main() -> None:
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 5555
    server = ThreadingHTTPServer(("127.0.0.1", port), StandIn)
    print(f"stand-in api on http://127.0.0.1:{port}", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
