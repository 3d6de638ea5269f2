"""Where call recordings are kept, and how one is served back: a directory or an S3 bucket.

A directory store writes the WAV under a hidden temporary name and renames it when complete,
so a crash never leaves half a recording under the final name; an S3 store uploads it with
boto3, off the event loop (``S3_ENDPOINT_URL`` for an S3-compatible store). Either answers a
request for a recording with HTTP range requests honoured, so the console's audio element
can seek (``agent.console.recordings``).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from urllib.request import url2pathname

from aiohttp import hdrs, web

from agent.config import Settings

CONTENT_TYPE = "audio/wav"
CHUNK_BYTES = 64 * 1024


class RecordingError(RuntimeError):
    """A recording could not be written or stored; the call goes on without it."""


def error_response(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def _unsatisfiable(size: object) -> web.Response:
    response = error_response(416, "the requested range is not in the recording")
    if size is not None:
        response.headers[hdrs.CONTENT_RANGE] = f"bytes */{size}"
    return response


class RecordingStore(ABC):
    """Where finished recordings go, and how one is served back."""

    @property
    @abstractmethod
    def spool_dir(self) -> Path:
        """Where a recording is written while its call goes on."""

    @abstractmethod
    async def save(self, call_id: str, spooled: Path) -> str:
        """Keep the finished WAV at ``spooled`` (which may be moved); return its URI."""

    @abstractmethod
    async def respond(self, request: web.Request, uri: str) -> web.StreamResponse:
        """The recording at ``uri`` as the response, honouring the request's Range."""


@dataclass(frozen=True)
class FileStore(RecordingStore):
    """A directory: ``<call id>.wav``, spooled in the same directory, renamed into place."""

    directory: Path

    @property
    def spool_dir(self) -> Path:
        return self.directory

    async def save(self, call_id: str, spooled: Path) -> str:
        final = self.directory / f"{call_id}.wav"
        await asyncio.to_thread(os.replace, spooled, final)  # atomic on one file system
        return final.resolve().as_uri()

    @staticmethod
    def path_of(uri: str) -> Path:
        return Path(url2pathname(urlsplit(uri).path))

    async def respond(self, request: web.Request, uri: str) -> web.StreamResponse:
        path = self.path_of(uri)
        if not await asyncio.to_thread(path.is_file):
            return error_response(404, "the call's recording is missing from the store")
        # aiohttp answers Range itself: 206 with Content-Range, 416 for a bad range.
        return web.FileResponse(path, headers={hdrs.CONTENT_TYPE: CONTENT_TYPE})


_clients: dict[str | None, Any] = {}
_clients_lock = threading.Lock()


def _s3_client(endpoint_url: str | None) -> Any:
    """One boto3 client per endpoint (clients are thread-safe; making one is slow)."""
    with _clients_lock:
        client = _clients.get(endpoint_url)
        if client is None:
            import boto3

            # Credentials and region from the standard AWS_* variables or files.
            client = boto3.session.Session().client("s3", endpoint_url=endpoint_url)
            _clients[endpoint_url] = client
        return client


@dataclass(frozen=True)
class S3Store(RecordingStore):
    """An S3 (or S3-compatible) bucket: ``s3://bucket/prefix/<call id>.wav``."""

    bucket: str
    prefix: str = ""
    endpoint_url: str | None = None
    spool: Path = field(default_factory=lambda: Path(tempfile.gettempdir()))

    @property
    def spool_dir(self) -> Path:
        return self.spool

    @classmethod
    def from_uri(cls, uri: str, endpoint_url: str | None) -> S3Store:
        parts = urlsplit(uri)
        return cls(parts.netloc, parts.path.strip("/"), endpoint_url)

    def key(self, call_id: str) -> str:
        return f"{self.prefix}/{call_id}.wav" if self.prefix else f"{call_id}.wav"

    async def save(self, call_id: str, spooled: Path) -> str:
        key = self.key(call_id)

        def upload() -> None:
            _s3_client(self.endpoint_url).upload_file(
                str(spooled), self.bucket, key, ExtraArgs={"ContentType": CONTENT_TYPE}
            )

        await asyncio.to_thread(upload)
        return f"s3://{self.bucket}/{key}"

    async def respond(self, request: web.Request, uri: str) -> web.StreamResponse:
        from botocore.exceptions import ClientError

        parts = urlsplit(uri)
        bucket, key = parts.netloc, parts.path.lstrip("/")
        client = _s3_client(self.endpoint_url)
        args: dict[str, Any] = {"Bucket": bucket, "Key": key}
        try:
            try:
                request.http_range  # noqa: B018 - refuse what aiohttp's FileResponse refuses
            except ValueError:
                head = await asyncio.to_thread(client.head_object, **args)
                return _unsatisfiable(head["ContentLength"])
            if hdrs.RANGE in request.headers:
                args["Range"] = request.headers[hdrs.RANGE]
            found = await asyncio.to_thread(client.get_object, **args)
        except ClientError as e:
            error = e.response.get("Error", {})
            if error.get("Code") == "InvalidRange":
                return _unsatisfiable(error.get("ActualObjectSize"))
            if error.get("Code") in ("NoSuchKey", "NoSuchBucket", "404"):
                return error_response(404, "the call's recording is missing from the store")
            raise
        body = found["Body"]
        headers = {
            hdrs.CONTENT_TYPE: CONTENT_TYPE,
            hdrs.ACCEPT_RANGES: "bytes",
            hdrs.CONTENT_LENGTH: str(found["ContentLength"]),
            hdrs.CACHE_CONTROL: "no-store",
        }
        if found.get("ContentRange"):
            headers[hdrs.CONTENT_RANGE] = found["ContentRange"]
        status = 206 if found.get("ContentRange") else 200
        response = web.StreamResponse(status=status, headers=headers)
        try:
            await response.prepare(request)
            if request.method != "HEAD":
                while chunk := await asyncio.to_thread(body.read, CHUNK_BYTES):
                    await response.write(chunk)
            await response.write_eof()
        finally:
            body.close()
        return response


def store_from_settings(settings: Settings) -> RecordingStore | None:
    """The store ``RECORDING_STORE`` names; None when recording is off."""
    where = settings.recording_store
    if not where:
        return None
    if where.startswith("s3://"):
        return S3Store.from_uri(where, settings.s3_endpoint_url)
    return FileStore(Path(where))


def store_for_uri(uri: str, settings: Settings) -> RecordingStore:
    """The store that holds ``uri``, whatever the store configured now."""
    if uri.startswith("s3://"):
        return S3Store.from_uri(uri, settings.s3_endpoint_url)
    if uri.startswith("file:"):
        return FileStore(FileStore.path_of(uri).parent)
    raise RecordingError(f"a recording URI of an unknown kind: {uri[:40]!r}")
