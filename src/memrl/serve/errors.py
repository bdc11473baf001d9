"""Errors in the OpenAI JSON shape: ``{"error": {"message", "type", "param", "code"}}``.

OpenAI clients (and ``memrl``'s own OpenAI engine) read this shape, so every
non-2xx answer of ``memrl serve`` uses it: our own checks, FastAPI's 404/405,
and request-body validation, which FastAPI would answer with a 422 list of
pydantic errors and which we answer with a 400 whose one-line message names
the field. Messages never echo request values (prompts may be private).
"""

from collections.abc import Callable
from typing import Any, Optional

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

# HTTP status -> OpenAI error type. 499 is nginx's "client closed request": it only reaches the access log.
_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
          405: "invalid_request_error", 409: "conflict_error", 410: "invalid_request_error",
          413: "invalid_request_error", 499: "client_closed_request",
          503: "service_unavailable"}


class APIError(Exception):
    """An error answered to the client as OpenAI-style JSON with ``status``."""

    def __init__(self, status: int, message: str, *, code: Optional[str] = None, param: Optional[str] = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param


def error_response(status: int, message: str, code: Optional[str] = None, param: Optional[str] = None) -> JSONResponse:
    body = {"error": {"message": message, "type": _TYPES.get(status, "server_error"), "param": param,
                      "code": code if code is not None else status}}
    return JSONResponse(body, status_code=status)


def field_name(loc: tuple[Any, ...]) -> str:
    """``("body", "stop_token_ids", 2)`` -> ``"stop_token_ids[2]"``; the leading "body" is implied."""
    parts = list(loc[1:] if loc and loc[0] == "body" else loc)
    name = ""
    for part in parts:
        name += f"[{part}]" if isinstance(part, int) else (f".{part}" if name else str(part))
    return name or "body"


def validation_message(exc: RequestValidationError) -> tuple[str, str]:
    """One line for the first pydantic error: ``(message, field)``."""
    errors = exc.errors()
    if not errors:
        return "invalid request body", "body"
    first = errors[0]
    name = field_name(tuple(first.get("loc", ())))
    if first.get("type") == "json_invalid":
        return "request body is not valid JSON", "body"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{name}: {first.get('msg', 'invalid value')}{more}", name


def install_error_handlers(app: FastAPI, no_route: Callable[[Request], str] | None = None) -> None:
    """Answer our errors, HTTP errors and body validation errors in the OpenAI shape; ``no_route(request)``:
    the message of a 404 for a path no route matches (code ``route_not_found``)."""

    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        return error_response(exc.status, exc.message, exc.code, exc.param)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if no_route is not None and exc.status_code == 404 and exc.detail == "Not Found":  # the router's own
            return error_response(404, no_route(request), code="route_not_found")
        response = error_response(exc.status_code, str(exc.detail))
        for key, value in (exc.headers or {}).items():
            response.headers[key] = value
        return response

    @app.exception_handler(RequestValidationError)
    async def _invalid_body(request: Request, exc: RequestValidationError) -> JSONResponse:
        message, name = validation_message(exc)
        return error_response(400, message, "invalid_value", name)
