#!/usr/bin/env python3
"""A minimal OTLP/HTTP receiver for benchmarks.

Accepts `POST /v1/traces` (any body), answers 200 with an empty
ExportTraceServiceResponse (an empty protobuf message), and counts the
requests and bytes it was sent. Listens on 127.0.0.1 on a free port (or
the one given), writes `port` to the file given with --port-file, and
prints its counts on stderr when stopped (SIGTERM or SIGINT).

    scripts/otlp-sink.py --port-file /tmp/otlp.port &
    jobstore bench drain --otlp-endpoint http://127.0.0.1:$(cat /tmp/otlp.port)
"""

import argparse
import http.server
import signal
import sys
import threading

counts = {"requests": 0, "bytes": 0}
lock = threading.Lock()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(n)
        with lock:
            counts["requests"] += 1
            counts["bytes"] += n
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    args = ap.parse_args()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    port = server.server_address[1]
    if args.port_file:
        with open(args.port_file + ".tmp", "w") as f:
            f.write(f"{port}\n")
        import os

        os.replace(args.port_file + ".tmp", args.port_file)

    def stop(*_):
        threading.Thread(target=server.shutdown).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    server.serve_forever()
    print(f"otlp-sink: {counts['requests']} requests, {counts['bytes']} bytes", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
