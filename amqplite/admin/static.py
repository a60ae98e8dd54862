"""The web dashboard's static files: ``/`` and ``/static/<name>``.

Only files found under ``admin/static/`` when the table is first built can be
served, looked up by exact name, so no request path ever reaches the file
system (no traversal). Files are read once and kept with their ETag: the
dashboard is a few small files, and a revalidation costs a dict lookup.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import attrs

from amqplite.admin.plumbing import Response

__all__ = ["StaticFiles"]

ROOT = Path(__file__).resolve().parent / "static"

TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}

#: the dashboard loads nothing from elsewhere and runs no inline script
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'")


@attrs.frozen
class File:
    body: bytes
    content_type: str
    etag: str


def _load(root: Path) -> dict[str, File]:
    files: dict[str, File] = {}
    for p in sorted(root.rglob("*")):
        ctype = TYPES.get(p.suffix)
        if ctype is None or not p.is_file():
            continue
        body = p.read_bytes()
        etag = '"' + hashlib.sha256(body).hexdigest()[:20] + '"'
        files[p.relative_to(root).as_posix()] = File(body, ctype, etag)
    return files


class StaticFiles:
    def __init__(self, root: Path = ROOT) -> None:
        self.root = root
        self._files: dict[str, File] | None = None

    def name(self, method: str, raw_path: str) -> str | None:
        """The static file a GET/HEAD of ``raw_path`` asks for, or None: not ours."""
        if method not in ("GET", "HEAD"):
            return None
        if raw_path in ("/", "/index.html"):
            return "index.html"
        if raw_path.startswith("/static/"):
            return raw_path[len("/static/"):]
        return None

    def response(self, name: str, if_none_match: str | None) -> Response:
        if self._files is None:
            self._files = _load(self.root)
        f = self._files.get(name)
        if f is None:
            return Response({"error": "Object Not Found", "reason": "Not Found"}, 404)
        # no-cache (set by the app for every answer) makes browsers revalidate,
        # so a broker upgrade is seen at once; an unchanged file costs a 304
        headers = {"etag": f.etag, "x-content-type-options": "nosniff",
                   "content-security-policy": CSP, "x-frame-options": "DENY",
                   "referrer-policy": "no-referrer"}
        if if_none_match is not None and f.etag in if_none_match:
            return Response(None, 304, headers)
        return Response(f.body, 200, headers, f.content_type)
