"""A small S3 test double that checks SigV4 like S3 does.

Path-style objects of one bucket (PUT, GET, DELETE), kept in a directory.
Every request must be signed with AWS Signature Version 4 by a known access
key *and its secret* (s3rver, the usual local S3, accepts any secret):
the signature is recomputed from the request as S3 does (canonical request,
string to sign, derived key); every x-amz-* header must be signed;
x-amz-content-sha256 is required (S3 answers "Missing required header"
without it) and, for a PUT, must be the body's sha256.  Answers carry S3's
XML error codes: InvalidAccessKeyId, SignatureDoesNotMatch,
XAmzContentSHA256Mismatch, NoSuchKey.

    python3 s3double.py --port P --bucket B --dir D --key K --secret S

prints "ready PORT" once it listens.  Standard library only.
"""
import argparse
import hashlib
import hmac
import os
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ALGO = "AWS4-HMAC-SHA256"


def sign_key(secret, date, region, service):
    k = hmac.new(("AWS4" + secret).encode(), date.encode(), hashlib.sha256).digest()
    for part in (region, service, "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    return k


def canonical_query(query):
    pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
    enc = lambda s: urllib.parse.quote(s, safe="-_.~")
    return "&".join(f"{enc(k)}={enc(v)}" for k, v in sorted(pairs))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "s3double"

    def log_message(self, fmt, *args):
        self.server.log.write(("%s %s\n" % (self.address_string(), fmt % args)))
        self.server.log.flush()

    def fail(self, status, code, message=""):
        body = (f"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code>"
                f"<Message>{message}</Message></Error>").encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def check_auth(self, body):
        auth = self.headers.get("Authorization", "")
        if not auth.startswith(ALGO + " "):
            return self.fail(403, "AccessDenied", "not signed with SigV4")
        fields = dict(p.strip().split("=", 1) for p in auth[len(ALGO) + 1:].split(","))
        cred = fields.get("Credential", "").split("/")
        if len(cred) != 5 or cred[4] != "aws4_request":
            return self.fail(400, "AuthorizationHeaderMalformed")
        key, date, region, service = cred[:4]
        if key != self.server.key:
            return self.fail(403, "InvalidAccessKeyId")
        payload = self.headers.get("x-amz-content-sha256")
        if payload is None:
            return self.fail(400, "InvalidRequest",
                             "Missing required header for this request: x-amz-content-sha256")
        signed = fields.get("SignedHeaders", "").split(";")
        for h in self.headers.keys():
            if h.lower().startswith("x-amz-") and h.lower() not in signed:
                return self.fail(403, "AccessDenied", f"header {h} is not signed")
        if "host" not in signed:
            return self.fail(403, "AccessDenied", "host is not signed")
        amz_date = self.headers.get("x-amz-date", "")
        if not amz_date.startswith(date):
            return self.fail(403, "SignatureDoesNotMatch", "date")
        path, _, query = self.path.partition("?")
        canon_headers = "".join(
            f"{h}:{' '.join(self.headers.get(h, '').split())}\n" for h in signed)
        canonical = "\n".join([self.command, path, canonical_query(query), canon_headers,
                               ";".join(signed), payload])
        to_sign = "\n".join([ALGO, amz_date, f"{date}/{region}/{service}/aws4_request",
                             hashlib.sha256(canonical.encode()).hexdigest()])
        want = hmac.new(sign_key(self.server.secret, date, region, service), to_sign.encode(),
                        hashlib.sha256).hexdigest()
        if not hmac.compare_digest(want, fields.get("Signature", "")):
            return self.fail(403, "SignatureDoesNotMatch")
        if payload != "UNSIGNED-PAYLOAD" and payload != hashlib.sha256(body).hexdigest():
            return self.fail(400, "XAmzContentSHA256Mismatch")
        return True

    def object_path(self):
        path = urllib.parse.unquote(self.path.partition("?")[0])
        parts = path.lstrip("/").split("/", 1)
        if len(parts) != 2 or parts[0] != self.server.bucket or not parts[1]:
            return None
        key = parts[1]
        if ".." in key.split("/"):
            return None
        return os.path.join(self.server.dir, key)

    def handle_one(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if self.check_auth(body) is not True:
            return
        self.server.count(self.command)
        p = self.object_path()
        if p is None:
            return self.fail(404, "NoSuchBucket")
        if self.command == "PUT":
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p + ".part", "wb") as f:
                f.write(body)
            os.replace(p + ".part", p)
            self.send_response(200)
            self.send_header("ETag", '"%s"' % hashlib.md5(body).hexdigest())
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.command == "GET":
            try:
                with open(p, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                return self.fail(404, "NoSuchKey")
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        elif self.command == "DELETE":
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
            self.send_response(204)
            self.end_headers()

    do_PUT = do_GET = do_DELETE = handle_one


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, addr, args):
        super().__init__(addr, Handler)
        self.bucket, self.dir, self.key, self.secret = args.bucket, args.dir, args.key, args.secret
        self.log = open(os.path.join(args.dir, "..", "s3double.log"), "a")
        self.lock = threading.Lock()
        self.counts = {}

    def count(self, method):
        with self.lock:
            self.counts[method] = self.counts.get(method, 0) + 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--bucket", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--secret", required=True)
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    srv = Server(("127.0.0.1", args.port), args)
    print("ready", srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
