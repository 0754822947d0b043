"""A thin client of the registry's REST API (any Confluent-compatible registry), for the CLI.

Each method is one HTTP request; it blocks up to ``timeout`` and raises
``RegistryClientError`` with the server's ``error_code`` and message on an error answer,
or when the registry cannot be reached.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import httpx

from headrace.registry.errors import RegistryError

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class RegistryClientError(RegistryError):
    """An error answer (``error_code`` as the server sent it) or an unreachable registry."""

    def __init__(self, message: str, error_code: int = 0, http_status: int = 0) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.http_status = http_status


class RegistryClient:
    """Talks to the registry at ``url`` (``http://host:port``)."""

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self._http = httpx.Client(timeout=timeout, headers={"Accept": CONTENT_TYPE})

    def close(self) -> None:
        self._http.close()

    def request(self, method: str, path: str, body: Any = None,
                params: dict[str, Any] | None = None) -> Any:
        query = {k: (str(v).lower() if isinstance(v, bool) else v)
                 for k, v in (params or {}).items() if v is not None}
        try:
            answer = self._http.request(
                method, self.url + path, params=query,
                content=None if body is None else json.dumps(body),
                headers={"Content-Type": CONTENT_TYPE})
        except httpx.HTTPError as e:
            raise RegistryClientError(f"registry at {self.url} unreachable: {e}") from e
        try:
            decoded = answer.json()
        except ValueError:
            decoded = answer.text
        if answer.status_code >= 400:
            if isinstance(decoded, dict):
                raise RegistryClientError(str(decoded.get("message", decoded)),
                                          int(decoded.get("error_code", answer.status_code)),
                                          answer.status_code)
            raise RegistryClientError(str(decoded), answer.status_code, answer.status_code)
        return decoded

    def subjects(self, deleted: bool = False) -> list[str]:
        return list(self.request("GET", "/subjects", params={"deleted": deleted}))

    def versions(self, subject: str, deleted: bool = False) -> list[int]:
        return list(self.request("GET", f"/subjects/{_q(subject)}/versions",
                                 params={"deleted": deleted}))

    def version(self, subject: str, version: str = "latest") -> dict[str, Any]:
        return dict(self.request("GET", f"/subjects/{_q(subject)}/versions/{version}"))

    def by_id(self, schema_id: int) -> dict[str, Any]:
        return dict(self.request("GET", f"/schemas/ids/{schema_id}"))

    def register(self, subject: str, schema: str, schema_type: str = "AVRO",
                 references: list[dict[str, Any]] | None = None,
                 normalize: bool = False) -> dict[str, Any]:
        body = {"schema": schema, "schemaType": schema_type, "references": references or []}
        return dict(self.request("POST", f"/subjects/{_q(subject)}/versions", body,
                                 {"normalize": normalize}))

    def check(self, subject: str, schema: str, schema_type: str = "AVRO",
              version: str | None = None) -> dict[str, Any]:
        path = f"/compatibility/subjects/{_q(subject)}/versions"
        if version is not None:
            path += f"/{version}"
        body = {"schema": schema, "schemaType": schema_type}
        return dict(self.request("POST", path, body, {"verbose": True}))

    def config(self, subject: str | None = None, level: str | None = None) -> dict[str, Any]:
        path = "/config" + (f"/{_q(subject)}" if subject else "")
        if level is None:
            return dict(self.request("GET", path, params={"defaultToGlobal": True}))
        return dict(self.request("PUT", path, {"compatibility": level}))

    def delete(self, subject: str, version: str | None = None,
               permanent: bool = False) -> Any:
        path = f"/subjects/{_q(subject)}" + (f"/versions/{version}" if version else "")
        return self.request("DELETE", path, params={"permanent": permanent})


def _q(subject: str) -> str:
    return quote(subject, safe="")
