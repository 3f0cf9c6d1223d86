"""The inspector's pages: a Starlette application over one :class:`~pgmem.Memory` and its
tenant. Each page is a plain function run in Starlette's thread pool (the Memory is
synchronous) that renders a Jinja2 template with autoescaping; no page runs a script."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup, escape
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

from pgmem import shown, validate
from pgmem.errors import (
    ConfigurationError,
    InvalidInputError,
    NotFoundError,
    PgmemError,
)
from pgmem.http_guard import LOOPBACK, HostGuard
from pgmem.ui import plots, ranking
from pgmem.ui.data import COUNT_CAP, KINDS, Reads, column_of, scope_ids
from pgmem.ui.guard import Guard, csrf_ok

if TYPE_CHECKING:
    from pgmem.memory import Memory

PAGE_SIZES = (20, 50, 100, 200)
MAX_SEARCH_LIMIT = 100
TIMELINE_BINS = 40
_ENV = Environment(
    loader=PackageLoader("pgmem.ui", "templates"), autoescape=True, undefined=StrictUndefined,
    trim_blocks=True, lstrip_blocks=True,
)
#: The characters marked rather than shown: those a terminal or a browser would act on (line
#: breaks and tabs excepted, which a page shows as they are).
_MARKED = re.compile(f"({shown.UNSHOWN.pattern})")


def visible(text: object) -> Markup:
    """``text`` escaped for HTML, each control or bidirectional character (see
    :data:`pgmem.shown.UNSHOWN`) replaced by its escape in a marked span, so that a stored
    text cannot reorder or hide what the page shows."""
    out = []
    for n, piece in enumerate(_MARKED.split(str(text))):
        if n % 2 and piece not in "\n\t":
            out.append(Markup('<span class="ctl" title="a control character">{}</span>')
                       .format(shown.escape_of(piece)))
        else:
            out.append(escape(piece))
    return Markup("").join(out)


_ENV.filters["visible"] = visible


def app(
    memory: Memory,
    *,
    token: str | None = None,
    write: bool = False,
    tenant: str | None = None,
    allowed_hosts: Sequence[str] | None = None,
) -> ASGIApp:
    """The memory inspector over ``memory`` as an ASGI application, to serve (``pgmem ui``)
    or to mount under a path of a Starlette or FastAPI application, behind its own
    authentication (``Mount("/memories", app=pgmem.ui.app(memory))``).

    ``token``: None (the host application authenticates) or the secret a browser must bring
    once in the URL (``?token=...``), exchanged for a session cookie. ``write``: offer edits
    (update a memory's text or metadata, delete a memory, delete a scope), each behind a
    confirmation and a CSRF token; read-only otherwise. ``tenant``: the one tenant the pages
    show -- the Memory's own (None: whatever it is); another raises, since every read and
    write goes through that Memory. ``allowed_hosts``: the Host names requests may name and a
    browser's Origin may come from (default: the loopback names, any port).

    Raises:
        ConfigurationError: ``tenant`` is not the Memory's.
    """
    if tenant is not None and tenant != memory.tenant:
        raise ConfigurationError(
            f"the inspector shows the tenant of its Memory ({memory.tenant!r}), not "
            f"{tenant!r}: give it Memory(..., tenant={tenant!r})"
        )
    pages = _Pages(memory, write=write)
    routes = [
        Route("/", pages.home, name="home"),
        Route("/scope", pages.scope, name="scope"),
        Route("/memory/{memory_id}", pages.memory_page, name="memory"),
        Route("/search", pages.search, name="search"),
        Route("/plots", pages.plots, name="plots"),
        Mount("/static", app=StaticFiles(packages=[("pgmem.ui", "static")]), name="static"),
    ]
    if write:
        routes += [
            Route("/memory/{memory_id}/edit", pages.edit, methods=["GET", "POST"], name="edit"),
            Route("/memory/{memory_id}/delete", pages.delete, methods=["GET", "POST"],
                  name="delete"),
            Route("/scope/delete", pages.delete_scope, methods=["GET", "POST"],
                  name="delete_scope"),
        ]
    return Guard(Starlette(routes=routes), hosts=HostGuard.of(allowed_hosts or LOOPBACK),
                 token=token)


class _Pages:
    def __init__(self, memory: Memory, *, write: bool) -> None:
        self.memory = memory
        self.reads = Reads(memory)
        self.write = write

    # -- helpers ---------------------------------------------------------------------------

    def render(self, request: Request, template: str, status: int = 200,
               **context: Any) -> HTMLResponse:
        def url(name: str, query: dict[str, Any] | None = None, **path: Any) -> str:
            base = request.url_for(name, **path).path
            items = [(k, v) for k, v in (query or {}).items() if v is not None and v != ""]
            return base + ("?" + urlencode(items, doseq=True) if items else "")

        html = _ENV.get_template(template).render(
            url=url, write=self.write, csrf=request.scope["state"]["csrf"],
            tenant=self.memory.tenant, kinds=tuple(KINDS), **context,
        )
        return HTMLResponse(html, status_code=status)

    def guarded(self, request: Request, page: Callable[[], Response]) -> Response:
        try:
            return page()
        except NotFoundError as exc:
            return self.render(request, "error.html", 404, message=str(exc))
        except PgmemError as exc:
            return self.render(request, "error.html", 400, message=str(exc))

    def scope_of(self, request: Request) -> tuple[str, str]:
        kind = request.query_params.get("kind", "user")
        column_of(kind)
        scope_id = request.query_params.get("id")
        validate.scope_ids(scope_id, None, None)
        if scope_id is None:
            raise InvalidInputError("give the scope's id")
        return kind, scope_id

    # -- pages -----------------------------------------------------------------------------

    def home(self, request: Request) -> Response:
        def page() -> Response:
            q = request.query_params
            kind = q.get("kind", "user")
            column_of(kind)
            size = _int(q.get("size"), 50, PAGE_SIZES)
            after, before = q.get("after") or None, q.get("before") or None
            last = q.get("last") == "1" and after is None and before is None
            rows = self.reads.scopes(kind, after=after, before=before, page=size + 1, last=last)
            more = len(rows) > size
            if before is not None or last:
                rows = rows[-size:] if more else rows
                has_prev, has_next = more, not last
            else:
                rows = rows[:size]
                has_prev, has_next = after is not None, more
            return self.render(
                request, "home.html", kind=kind, size=size, rows=rows, cap=COUNT_CAP,
                summary=self.reads.summary(), has_prev=has_prev and bool(rows),
                has_next=has_next and bool(rows), sizes=PAGE_SIZES,
            )

        return self.guarded(request, page)

    def scope(self, request: Request) -> Response:
        def page() -> Response:
            kind, scope_id = self.scope_of(request)
            q = request.query_params
            filters_text = q.get("filters", "").strip()
            filters = _json_object(filters_text, "the filter") if filters_text else None
            text = q.get("q", "").strip()
            size = _int(q.get("size"), 50, PAGE_SIZES)
            ids = scope_ids(kind, scope_id)
            records: list[Any]
            next_cursor = None
            if text:
                hits = self.memory.search(text, **ids, filters=filters, limit=MAX_SEARCH_LIMIT,
                                          mode="keyword")
                records = list(hits)
            else:
                got = self.memory.get_all(**ids, filters=filters, limit=size,
                                          cursor=q.get("cursor") or None)
                records, next_cursor = list(got.items), got.next_cursor
            extras = self.reads.extras([r.id for r in records])
            return self.render(
                request, "scope.html", kind=kind, scope_id=scope_id, records=records,
                extras=extras, filters=filters_text, text=text, size=size, sizes=PAGE_SIZES,
                next_cursor=next_cursor, cursor=q.get("cursor") or "", pretty=_pretty,
            )

        return self.guarded(request, page)

    def memory_page(self, request: Request) -> Response:
        def page() -> Response:
            memory_id = _uuid(request.path_params["memory_id"])
            events = self.memory.history(memory_id)
            try:
                record = self.memory.get(memory_id)
            except NotFoundError:
                record = None
            entities, before, after, extra = [], [], [], None
            if record is not None:
                entities = self.reads.entities(memory_id)
                extra = self.reads.extras([memory_id]).get(memory_id)
                for kind, column in KINDS.items():
                    scope_id = getattr(record, column)
                    if scope_id is not None:
                        found = self.reads.neighbours(kind, scope_id, [memory_id])
                        row = found.get(memory_id)
                        if row is not None:
                            texts = self.reads.texts([*row["before"], *row["after"]])
                            before = [texts[i] for i in reversed(row["before"]) if i in texts]
                            after = [texts[i] for i in row["after"] if i in texts]
                            neighbour_scope = (kind, scope_id)
                            break
                else:
                    neighbour_scope = None
            else:
                neighbour_scope = None
            return self.render(
                request, "memory.html", memory_id=memory_id, record=record, events=events,
                entities=entities, before=before, after=after, extra=extra,
                neighbour_scope=neighbour_scope, cap=COUNT_CAP, pretty=_pretty,
            )

        return self.guarded(request, page)

    def search(self, request: Request) -> Response:
        def page() -> Response:
            q = request.query_params
            query = q.get("q", "").strip()
            kind = q.get("kind", "user")
            column_of(kind)
            scope_id = q.get("id", "")
            limit = _int(q.get("limit"), 10, range(1, MAX_SEARCH_LIMIT + 1))
            threshold = _float(q.get("threshold"), 0.1)
            off = [s for s in q.getlist("off") if s in ranking.SIGNALS]
            context: dict[str, Any] = {
                "query": query, "kind": kind, "scope_id": scope_id, "limit": limit,
                "threshold": threshold, "off": off, "signals": ranking.SIGNALS, "hits": [],
                "removed": [], "reranked": [], "parts": ranking.parts, "searched": False,
                "by_id": {},
            }
            if query and scope_id:
                ids = scope_ids(kind, scope_id)
                hits = self.memory.search(query, **ids, limit=limit, threshold=threshold)
                unfiltered = self.memory.search(query, **ids, limit=limit, threshold=-1.0)
                removed = [h for h in unfiltered if h.explain.semantic < threshold]
                candidates = {h.id: h for h in [*hits, *unfiltered]}
                near = self.reads.neighbours(kind, scope_id, list(candidates))
                reranked = ranking.rerank(
                    list(candidates.values()), off=off, threshold=threshold, limit=limit,
                    neighbours={k: (v["before"], v["after"]) for k, v in near.items()},
                    searched=[h.id for h in hits],
                )
                context.update(hits=hits, removed=removed, searched=True,
                               reranked=reranked if off else [], by_id=candidates)
            return self.render(request, "search.html", **context)

        return self.guarded(request, page)

    def plots(self, request: Request) -> Response:
        def page() -> Response:
            kind, scope_id = self.scope_of(request)
            timeline = self.reads.timeline(kind, scope_id, TIMELINE_BINS)
            size = sum(int(row["memories"]) for row in timeline)
            fanout = self.reads.fanout(kind, scope_id)
            return self.render(
                request, "plots.html", kind=kind, scope_id=scope_id, size=size,
                timeline=plots.timeline(timeline, TIMELINE_BINS),
                fanout=plots.fanout(fanout, size), fanout_rows=fanout,
            )

        return self.guarded(request, page)

    # -- edits (write=True only) -------------------------------------------------------------

    async def edit(self, request: Request) -> Response:
        form = await request.form() if request.method == "POST" else None
        return await _in_thread(self._edit, request, form)

    def _edit(self, request: Request, form: Any) -> Response:
        def page() -> Response:
            memory_id = _uuid(request.path_params["memory_id"])
            record = self.memory.get(memory_id)
            if form is None:
                return self.render(request, "edit.html", record=record, text=record.text,
                                   metadata=_pretty(record.metadata), confirming=False,
                                   pretty=_pretty)
            refused = self._csrf(request, form)
            if refused is not None:
                return refused
            text = str(form.get("text", ""))
            metadata_text = str(form.get("metadata", "")).strip()
            metadata = _json_object(metadata_text, "the metadata") if metadata_text else {}
            if form.get("confirm") != "yes":
                return self.render(request, "edit.html", record=record, text=text,
                                   metadata=metadata_text, confirming=True, pretty=_pretty)
            if text != record.text or metadata != record.metadata:
                self.memory.update(
                    memory_id, text=text if text != record.text else None,
                    metadata=metadata if metadata != record.metadata else None,
                )
            return RedirectResponse(request.url_for("memory", memory_id=str(memory_id)).path,
                                    status_code=303)

        return self.guarded(request, page)

    async def delete(self, request: Request) -> Response:
        form = await request.form() if request.method == "POST" else None
        return await _in_thread(self._delete, request, form)

    def _delete(self, request: Request, form: Any) -> Response:
        def page() -> Response:
            memory_id = _uuid(request.path_params["memory_id"])
            record = self.memory.get(memory_id)
            if form is None:
                return self.render(request, "delete.html", record=record)
            refused = self._csrf(request, form)
            if refused is not None:
                return refused
            self.memory.delete(memory_id)
            return RedirectResponse(request.url_for("memory", memory_id=str(memory_id)).path,
                                    status_code=303)

        return self.guarded(request, page)

    async def delete_scope(self, request: Request) -> Response:
        form = await request.form() if request.method == "POST" else None
        return await _in_thread(self._delete_scope, request, form)

    def _delete_scope(self, request: Request, form: Any) -> Response:
        def page() -> Response:
            kind, scope_id = self.scope_of(request)
            if form is None:
                return self.render(request, "delete_scope.html", kind=kind, scope_id=scope_id,
                                   row=self.reads.scope(kind, scope_id), cap=COUNT_CAP)
            refused = self._csrf(request, form)
            if refused is not None:
                return refused
            deleted = self.memory.delete_all(**scope_ids(kind, scope_id))
            return self.render(request, "deleted.html", kind=kind, scope_id=scope_id,
                               deleted=deleted)

        return self.guarded(request, page)

    def _csrf(self, request: Request, form: Any) -> Response | None:
        if csrf_ok(request.scope["state"].get("csrf"), form.get("csrf")):
            return None
        return self.render(request, "error.html", 403,
                           message="this form's CSRF token is missing or wrong: reload the page")


async def _in_thread(function: Callable[..., Response], *args: Any) -> Response:
    from starlette.concurrency import run_in_threadpool

    return await run_in_threadpool(function, *args)


def _uuid(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise InvalidInputError(f"not a memory id: {value[:60]!r}") from None


def _int(value: str | None, default: int, allowed: Sequence[int] | range) -> int:
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise InvalidInputError(f"not a whole number: {value[:40]!r}") from None
    if number not in allowed:
        raise InvalidInputError(f"{number} is not one of the sizes offered")
    return number


def _float(value: str | None, default: float) -> float:
    if value is None or value == "":
        return default
    try:
        return validate.threshold(float(value))
    except ValueError:
        raise InvalidInputError(f"not a number: {value[:40]!r}") from None


def _json_object(text: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InvalidInputError(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidInputError(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=True, sort_keys=True, default=str)
