"""A browser-like HTTP client for the dashboard tests: a cookie jar, forms, CSRF tokens."""

from __future__ import annotations

import http.cookiejar
import re
import urllib.error
import urllib.parse
import urllib.request

CSRF = re.compile(r'name="csrf" value="([^"]+)"')
# Any reference that leaves the server: a scheme or a protocol-relative address.
EXTERNAL = re.compile(r"""(?:src|href|action)\s*=\s*["']?\s*(?:[a-z][a-z0-9+.-]*:|//)""", re.I)


class Browser:
    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def get(self, path: str) -> tuple[int, str, str]:
        """(status, final path after redirects, body)."""
        return self._open(urllib.request.Request(self.base + path))

    def post(self, path: str, fields: dict[str, str]) -> tuple[int, str, str]:
        data = urllib.parse.urlencode(fields).encode()
        return self._open(urllib.request.Request(self.base + path, data=data, method="POST"))

    def _open(self, r: urllib.request.Request) -> tuple[int, str, str]:
        try:
            with self.opener.open(r, timeout=30) as resp:
                url = urllib.parse.urlsplit(resp.url)
                return (
                    resp.status,
                    url.path + (f"?{url.query}" if url.query else ""),
                    resp.read().decode(),
                )
        except urllib.error.HTTPError as e:
            return e.code, urllib.parse.urlsplit(e.url).path, e.read().decode()

    def csrf(self, page: str) -> str:
        m = CSRF.search(page)
        assert m, "the page has no CSRF token"
        return m.group(1)

    def cookies(self) -> dict[str, http.cookiejar.Cookie]:
        return {c.name: c for c in self.jar}


def external_refs(page: str) -> list[str]:
    return EXTERNAL.findall(page)
