#!/usr/bin/env python3
"""mock_hub.py: a local stand-in for the Hugging Face hub's HTTP API, for tests/hub (no internet in CI).

Serves the endpoints huggingface_hub and vllm.c use, with the hub's headers and error codes:
  GET  /api/models/ORG/NAME/revision/REV[?blobs=true]  {"id", "sha", "siblings": [{"rfilename", "size",
                                                      "blobId", "lfs": {"sha256", "size"}}]}
  GET|HEAD /ORG/NAME/resolve/REV/PATH                 small files: 200 with ETag "<git blob id>";
                                                      LFS files: 302 to /cdn-lfs/ORG/NAME/SHA256 with
                                                      X-Linked-Etag / X-Linked-Size; X-Repo-Commit on both
  GET  /cdn-lfs/ORG/NAME/SHA256                       the bytes (Range requests answered 206)
Errors: 404 with X-Error-Code RepoNotFound / RevisionNotFound / EntryNotFound; 401 GatedRepo.

Configured by a JSON file (--config): {"repos": {"ORG/NAME": {"dir": folder whose regular files form the
repository, "shards": 2 (split model.safetensors into an index and 2 shards), "files": {"NAME": path} (more
files), "token": "..." (gated: requests need "Authorization: Bearer ..."), "corrupt": ["PATH"] (one byte of the
served content flipped), "interrupt": {"PATH": [BYTES, TIMES]} (the first TIMES transfers of PATH stop after
BYTES bytes, the connection closed), "branches": ["v1"] (more revisions naming the same commit), "norange": true
(Range headers ignored: the whole file, 200, as some mirrors and proxies do)}}}.
Writes the port it listens on to --port-file and one line per request to --log: METHOD PATH RANGE AUTH.
"""
import argparse
import hashlib
import json
import os
import struct
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def shard_safetensors(data, n):
    """Splits one safetensors file into n files and their index (tensors in header order)."""
    hlen = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + hlen])
    meta = header.pop("__metadata__", None)
    body = data[8 + hlen:]
    names = sorted(header, key=lambda k: header[k]["data_offsets"][0])
    groups = [names[i::n] for i in range(n)]
    files, weight_map = {}, {}
    for i, group in enumerate(groups):
        fname = "model-%05d-of-%05d.safetensors" % (i + 1, n)
        h, parts, off = {}, [], 0
        for name in group:
            a, b = header[name]["data_offsets"]
            h[name] = dict(header[name], data_offsets=[off, off + b - a])
            parts.append(body[a:b])
            off += b - a
            weight_map[name] = fname
        if meta is not None:
            h["__metadata__"] = meta
        hb = json.dumps(h).encode()
        hb += b" " * (-len(hb) % 8)
        files[fname] = struct.pack("<Q", len(hb)) + hb + b"".join(parts)
    index = {"metadata": {"total_size": len(body)}, "weight_map": weight_map}
    files["model.safetensors.index.json"] = json.dumps(index, indent=2).encode()
    return files


class Repo:
    def __init__(self, rid, cfg):
        self.id = rid
        self.files = {}
        d = cfg.get("dir")
        if d:
            for name in sorted(os.listdir(d)):
                p = os.path.join(d, name)
                if os.path.isfile(p):
                    with open(p, "rb") as f:
                        self.files[name] = f.read()
        for name, p in cfg.get("files", {}).items():
            with open(p, "rb") as f:
                self.files[name] = f.read()
        if cfg.get("shards") and "model.safetensors" in self.files:
            self.files.update(shard_safetensors(self.files.pop("model.safetensors"), cfg["shards"]))
        self.token = cfg.get("token")
        self.corrupt = set(cfg.get("corrupt", []))
        self.interrupt = {k: list(v) for k, v in cfg.get("interrupt", {}).items()}
        self.norange = bool(cfg.get("norange"))
        self.meta = {}
        h = hashlib.sha1()
        for name in sorted(self.files):
            data = self.files[name]
            lfs = name.endswith((".safetensors", ".gguf", ".bin")) or len(data) > 10000
            blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
            sha = hashlib.sha256(data).hexdigest()
            self.meta[name] = {"lfs": lfs, "blob": blob, "sha256": sha}
            h.update(name.encode() + b"\0" + sha.encode())
        self.sha = h.hexdigest()
        self.revisions = {"main", self.sha, *cfg.get("branches", [])}
        self.by_sha256 = {m["sha256"]: n for n, m in self.meta.items()}

    def served(self, name):
        data = self.files[name]
        if name in self.corrupt and data:
            i = len(data) // 2
            data = data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:]
        return data


class Handler(BaseHTTPRequestHandler):
    server_version = "mock-hub/1"
    protocol_version = "HTTP/1.0"

    def log_message(self, fmt, *args):  # quiet on stderr; requests go to --log
        pass

    def record(self):
        line = "%s %s %s %s\n" % (self.command, self.path, self.headers.get("Range", "-"),
                                  "auth" if self.headers.get("Authorization") else "-")
        with self.server.log_lock:
            with open(self.server.log_path, "a") as f:
                f.write(line)

    def send_error_code(self, status, code, message):
        body = json.dumps({"error": message}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if code:
            self.send_header("X-Error-Code", code)
            self.send_header("X-Error-Message", message)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def find_repo(self, parts):
        if len(parts) < 2:
            return None
        return self.server.repos.get(parts[0] + "/" + parts[1])

    def authorized(self, repo):
        if not repo.token:
            return True
        return self.headers.get("Authorization") == "Bearer " + repo.token

    def send_bytes(self, data, extra_headers, interrupt_key=None, repo=None):
        start, end = 0, len(data)
        rng = None if repo is not None and repo.norange else self.headers.get("Range")
        status = 200
        if rng and rng.startswith("bytes="):
            a, _, b = rng[6:].partition("-")
            start = int(a) if a else 0
            if b:
                end = min(end, int(b) + 1)
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", "bytes */%d" % len(data))
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status = 206
        self.send_response(status)
        for k, v in extra_headers:
            self.send_header(k, v)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(end - start))
        if status == 206:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end - 1, len(data)))
        self.end_headers()
        if self.command == "HEAD":
            return
        chunk = data[start:end]
        if interrupt_key and repo is not None:
            with self.server.log_lock:
                plan = repo.interrupt.get(interrupt_key)
                cut = None
                if plan and plan[1] > 0:
                    plan[1] -= 1
                    cut = plan[0]
            if cut is not None:
                self.wfile.write(chunk[:cut])
                self.wfile.flush()
                self.close_connection = True
                return
        self.wfile.write(chunk)

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        self.record()
        url = urllib.parse.urlsplit(self.path)
        parts = [urllib.parse.unquote(p) for p in url.path.strip("/").split("/")]
        if parts[:2] == ["api", "models"]:
            rest = parts[2:]
            repo = self.find_repo(rest)
            if repo is None:
                return self.send_error_code(404, "RepoNotFound", "Repository not found")
            if not self.authorized(repo):
                return self.send_error_code(401, "GatedRepo", "Access to model %s is restricted." % repo.id)
            rev = "main"
            if len(rest) >= 4 and rest[2] == "revision":
                rev = "/".join(rest[3:])
            if rev not in repo.revisions:
                return self.send_error_code(404, "RevisionNotFound", "Invalid rev id: %s" % rev)
            blobs = "blobs=true" in (url.query or "")
            sib = []
            for name in sorted(repo.files):
                m = repo.meta[name]
                e = {"rfilename": name}
                if blobs:
                    e["size"] = len(repo.files[name])
                    e["blobId"] = m["blob"]
                    if m["lfs"]:
                        e["lfs"] = {"sha256": m["sha256"], "size": len(repo.files[name]), "pointerSize": 134}
                sib.append(e)
            body = json.dumps({"_id": "x", "id": repo.id, "modelId": repo.id, "sha": repo.sha,
                               "siblings": sib}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
            return
        if parts and parts[0] == "cdn-lfs" and len(parts) == 4:
            repo = self.server.repos.get(parts[1] + "/" + parts[2])
            name = repo.by_sha256.get(parts[3]) if repo else None
            if name is None:
                return self.send_error_code(404, None, "no such object")
            return self.send_bytes(repo.served(name), [("ETag", '"%s"' % parts[3])], name, repo)
        if len(parts) >= 5 and parts[2] == "resolve":
            repo = self.find_repo(parts)
            if repo is None:
                return self.send_error_code(404, "RepoNotFound", "Repository not found")
            if not self.authorized(repo):
                return self.send_error_code(401, "GatedRepo", "Access to model %s is restricted." % repo.id)
            rev, name = parts[3], "/".join(parts[4:])
            if rev not in repo.revisions:
                return self.send_error_code(404, "RevisionNotFound", "Invalid rev id: %s" % rev)
            if name not in repo.files:
                return self.send_error_code(404, "EntryNotFound", "%s does not exist" % name)
            m = repo.meta[name]
            common = [("X-Repo-Commit", repo.sha)]
            if m["lfs"]:
                self.send_response(302)
                self.send_header("Location", "/cdn-lfs/%s/%s" % (repo.id, m["sha256"]))
                self.send_header("X-Linked-Etag", '"%s"' % m["sha256"])
                self.send_header("X-Linked-Size", str(len(repo.files[name])))
                for k, v in common:
                    self.send_header(k, v)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            return self.send_bytes(repo.served(name), common + [("ETag", '"%s"' % m["blob"])], name, repo)
        return self.send_error_code(404, None, "not found")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--log", required=True)
    a = ap.parse_args()
    with open(a.config) as f:
        cfg = json.load(f)
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    srv.repos = {rid: Repo(rid, rc) for rid, rc in cfg["repos"].items()}
    srv.log_path = a.log
    srv.log_lock = threading.Lock()
    tmp = a.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(tmp, a.port_file)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
