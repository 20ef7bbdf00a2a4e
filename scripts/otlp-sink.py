#!/usr/bin/env python3
"""A stand-in OTLP/HTTP collector for the trace benchmarks: reads each
POST whole, answers 200 and counts posts and bytes into the file named by
its first argument (every 100 posts). It never decodes a span: it measures
what weir's export costs weir, not a collector's work.

    scripts/otlp-sink.py COUNT_FILE [PORT]    # default port 4318
"""
import http.server
import sys
import threading

count = {"posts": 0, "bytes": 0}
lock = threading.Lock()


class Sink(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        n = int(self.headers.get("content-length", 0))
        self.rfile.read(n)
        with lock:
            count["posts"] += 1
            count["bytes"] += n
            if count["posts"] % 100 == 0:
                with open(sys.argv[1], "w") as f:
                    f.write(f"{count['posts']} posts {count['bytes']} bytes\n")
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


port = int(sys.argv[2]) if len(sys.argv) > 2 else 4318
http.server.ThreadingHTTPServer(("127.0.0.1", port), Sink).serve_forever()
