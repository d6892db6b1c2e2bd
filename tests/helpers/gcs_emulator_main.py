"""Runs gcp-storage-emulator with GCS's generation preconditions added (run as a script).

The emulator (2026.7.19) ignores `ifGenerationMatch`: an upload with `ifGenerationMatch=0` over an
existing object replaces it, where real GCS answers 412 Precondition Failed. lmshards' output leases
rely on that precondition, so this wraps the upload and delete handlers to check it first, as GCS
does. The emulator serves one request at a time (http.server.HTTPServer), so check-then-write is
atomic here, as it is on GCS.
"""

from __future__ import annotations

import functools
import sys
from http import HTTPStatus

from gcp_storage_emulator import server
from gcp_storage_emulator.__main__ import main
from gcp_storage_emulator.exceptions import NotFound
from gcp_storage_emulator.handlers import objects

_PRECONDITION_FAILED = {
    "error": {
        "code": 412,
        "message": "At least one of the pre-conditions you specified did not hold.",
        "errors": [{"reason": "conditionNotMet", "message": "Precondition Failed"}],
    }
}


def _object_name(request) -> str | None:
    if "object_id" in request.params:
        return request.params["object_id"]
    if "name" in request.query:
        return request.query["name"][0]
    data = request.data
    return data["meta"].get("name") if isinstance(data, dict) and "meta" in data else None


def _precondition_holds(request, storage) -> bool:
    wanted = request.query.get("ifGenerationMatch")
    if not wanted:
        return True
    name = _object_name(request)
    try:
        current = str(storage.get_file_obj(request.params["bucket_name"], name)["generation"])
    except NotFound:
        current = "0"
    return current == wanted[0]


def _with_precondition(handler):
    @functools.wraps(handler)
    def checked(request, response, storage, *args, **kwargs):
        if not _precondition_holds(request, storage):
            response.status = HTTPStatus.PRECONDITION_FAILED
            response.json(_PRECONDITION_FAILED)
            return None
        return handler(request, response, storage, *args, **kwargs)

    return checked


def _install() -> None:
    wrapped = {
        objects.insert: _with_precondition(objects.insert),
        objects.delete: _with_precondition(objects.delete),
    }
    server.HANDLERS = tuple(
        (regex, {method: wrapped.get(h, h) for method, h in handlers.items()})
        for regex, handlers in server.HANDLERS
    )
    objects.insert = wrapped[objects.insert]  # the router's fallback for uploads without /upload


if __name__ == "__main__":
    _install()
    sys.exit(main())
