"""WARC files for the web readers' tests, written as Common Crawl writes them: each record a header block,
its payload and CRLF CRLF, each record its own gzip member when compressed."""

from __future__ import annotations

import gzip
from pathlib import Path


def warc_record(
    kind: str,
    payload: bytes,
    *,
    url: str | None = None,
    version: bytes = b"WARC/1.0",
    **headers: str,
) -> bytes:
    """One WARC record of WARC-Type `kind` (response, conversion, request, warcinfo ...)."""
    lines = [version, f"WARC-Type: {kind}".encode()]
    if url is not None:
        lines.append(f"WARC-Target-URI: {url}".encode())
    lines += [f"{name.replace('_', '-')}: {value}".encode() for name, value in headers.items()]
    lines.append(f"Content-Length: {len(payload)}".encode())
    return b"\r\n".join(lines) + b"\r\n\r\n" + payload + b"\r\n\r\n"


def http_response(
    body: bytes,
    content_type: str = "text/html; charset=utf-8",
    status: str = "200 OK",
    **headers: str,
) -> bytes:
    """An HTTP response as a WARC response record's payload holds it: status line, headers, blank line, body."""
    lines = [f"HTTP/1.1 {status}".encode(), f"Content-Type: {content_type}".encode()]
    lines += [f"{name.replace('_', '-')}: {value}".encode() for name, value in headers.items()]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def html_response(url: str, body: bytes, **kwargs: str) -> bytes:
    """A response record of an HTML page."""
    return warc_record(
        "response",
        http_response(body, **kwargs),
        url=url,
        Content_Type="application/http; msgtype=response",
    )


def write_warc(path: Path, records: list[bytes]) -> Path:
    """Writes records to path; a path ending in .gz gets one gzip member per record."""
    if path.name.endswith(".gz"):
        path.write_bytes(b"".join(gzip.compress(record, mtime=0) for record in records))
    else:
        path.write_bytes(b"".join(records))
    return path


def page(title: str, *paragraphs: str, nav: str = "Home | About | Contact") -> bytes:
    """A small HTML page: a navigation bar, an article of paragraphs, a footer."""
    body = "".join(f"<p>{p}</p>" for p in paragraphs)
    return (
        f"<html><head><title>{title}</title></head><body><nav>{nav}</nav>"
        f"<article><h1>{title}</h1>{body}</article><footer>Copyright 2024</footer></body></html>"
    ).encode()
