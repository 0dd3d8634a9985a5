"""PJRT_Event_* entry points (pjrt_c_api.h "Events")."""
from __future__ import annotations

from pjrt_ref.capi import handles
from pjrt_ref.errors import InvalidArgument, PjrtRefError
from pjrt_ref.model.event import Event
from pjrt_ref.capi import cdata, fast_paths
from pjrt_ref.capi._boundary import entry_point
from pjrt_ref.capi.cdata import Args, error_from_exception, text_arg


def new_event_handle(event: Event | None = None):
    """A fresh `PJRT_Event*` the caller destroys (a ready event by default).

    A ready event is a C-only handle when the fast paths are on (the Event_*
    calls on it then never enter Python; capi_shim/fast_paths.c).
    """
    if event is None:
        c_event = fast_paths.new_ready_event()
        if c_event is not None:
            return c_event
        event = Event.ready()
    return handles.add(event)


def _event(args: Args) -> Event:
    return handles.get(args.event, Event, "PJRT_Event")


def _error_handle(error: PjrtRefError | None):
    return cdata.NULL if error is None else error_from_exception("PJRT_Event", error)


@entry_point("PJRT_Event_Destroy")
def event_destroy(args: Args) -> None:
    """PJRT_Event_Destroy."""
    handles.remove(args.event, Event, "PJRT_Event")


@entry_point("PJRT_Event_IsReady")
def event_is_ready(args: Args) -> None:
    """PJRT_Event_IsReady."""
    args.is_ready = _event(args).is_ready


@entry_point("PJRT_Event_Error")
def event_error(args: Args) -> None:
    """PJRT_Event_Error: the event's error (its code and message), if it failed."""
    error = _event(args).error
    if error is not None:
        raise error


@entry_point("PJRT_Event_Await")
def event_await(args: Args) -> None:
    """PJRT_Event_Await: block until ready, then report its error, if any."""
    error = _event(args).wait()
    if error is not None:
        raise error


@entry_point("PJRT_Event_OnReady")
def event_on_ready(args: Args) -> None:
    """PJRT_Event_OnReady: call `callback(error, user_arg)` once ready.

    The callback owns the error it gets. cffi releases the GIL around the call
    into C, so the callback may block or call back into the plugin.
    """
    callback, user_arg = args.callback, args.user_arg
    if callback == cdata.NULL:
        raise InvalidArgument("PJRT_Event_OnReady: callback is NULL")
    _event(args).on_ready(lambda error: callback(_error_handle(error), user_arg))


@entry_point("PJRT_Event_Create")
def event_create(args: Args) -> None:
    """PJRT_Event_Create: a pending event, completed by PJRT_Event_Set."""
    args.event = new_event_handle(Event())


@entry_point("PJRT_Event_Set")
def event_set(args: Args) -> None:
    """PJRT_Event_Set: complete an event made by PJRT_Event_Create."""
    event = _event(args)
    code = int(args.error_code)
    error = None
    if code != 0:
        error = cdata.caller_error("PJRT_Event_Set", code, text_arg(args.error_message, args.error_message_size))
    event.set(error)
