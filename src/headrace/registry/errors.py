"""Errors of the schema registry (``headrace.registry``).

Each error carries Confluent Schema Registry's HTTP status and ``error_code``, so the REST
layer maps it to the same JSON body (``{"error_code": ..., "message": ...}``) that
Confluent's clients parse; the mapping happens only at that boundary.
"""

from __future__ import annotations

from headrace.errors import HeadraceError


class RegistryError(HeadraceError):
    """Base class of registry errors; ``http_status`` and ``error_code`` as Confluent's."""

    http_status = 500
    error_code = 50001

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _kind(name: str, http_status: int, error_code: int, doc: str) -> type[RegistryError]:
    return type(name, (RegistryError,),
                {"http_status": http_status, "error_code": error_code, "__doc__": doc})


SubjectNotFound = _kind("SubjectNotFound", 404, 40401, "The subject does not exist.")
VersionNotFound = _kind("VersionNotFound", 404, 40402, "The subject has no such version.")
SchemaNotFound = _kind("SchemaNotFound", 404, 40403, "No schema with that id, or not in that subject.")
SubjectSoftDeleted = _kind("SubjectSoftDeleted", 404, 40404, "The subject was soft-deleted.")
SubjectNotSoftDeleted = _kind("SubjectNotSoftDeleted", 404, 40405,
                              "A permanent delete needs a soft delete first.")
VersionSoftDeleted = _kind("VersionSoftDeleted", 404, 40406, "The version was soft-deleted.")
VersionNotSoftDeleted = _kind("VersionNotSoftDeleted", 404, 40407,
                              "A permanent delete of a version needs a soft delete first.")
SubjectConfigNotFound = _kind("SubjectConfigNotFound", 404, 40408,
                              "The subject has no compatibility level of its own.")
SubjectModeNotFound = _kind("SubjectModeNotFound", 404, 40409,
                            "The subject has no mode of its own.")
IncompatibleSchema = _kind("IncompatibleSchema", 409, 409,
                           "The schema breaks the subject's compatibility level.")
InvalidSchema = _kind("InvalidSchema", 422, 42201, "The schema does not parse or resolve.")
InvalidVersion = _kind("InvalidVersion", 422, 42202, "A version that is not 1.. or latest.")
InvalidCompatibilityLevel = _kind("InvalidCompatibilityLevel", 422, 42203,
                                  "Not one of the seven compatibility levels.")
InvalidMode = _kind("InvalidMode", 422, 42204, "Not READWRITE, READONLY or IMPORT.")
OperationNotPermitted = _kind("OperationNotPermitted", 422, 42205,
                              "The mode forbids it (READONLY, or an id outside IMPORT).")
ReferenceExists = _kind("ReferenceExists", 422, 42206,
                        "Another schema still references the one being deleted.")
InvalidRequest = _kind("InvalidRequest", 422, 422, "A request body or parameter that is wrong.")
StoreError = _kind("StoreError", 500, 50001, "The `_schemas` topic could not be read or written.")
StoreTimeout = _kind("StoreTimeout", 500, 50002, "The `_schemas` topic did not answer in time.")
