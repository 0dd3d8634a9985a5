"""PJRT_Error_* entry points (pjrt_c_api.h "Errors")."""
from __future__ import annotations

from pjrt_ref.capi import handles
from pjrt_ref.capi._boundary import entry_point
from pjrt_ref.capi.cdata import Args, ErrorObject


@entry_point("PJRT_Error_Destroy")
def error_destroy(args: Args) -> None:
    """PJRT_Error_Destroy: free an error the plugin returned."""
    if handles.address(args.error) == 0:
        return
    handles.remove(args.error, ErrorObject, "PJRT_Error")


@entry_point("PJRT_Error_Message")
def error_message(args: Args) -> None:
    """PJRT_Error_Message: the message, owned by the error."""
    error = handles.get(args.error, ErrorObject, "PJRT_Error")
    args.message = error.c_message
    args.message_size = error.c_message_size


@entry_point("PJRT_Error_GetCode")
def error_get_code(args: Args) -> None:
    """PJRT_Error_GetCode: the PJRT_Error_Code."""
    args.code = handles.get(args.error, ErrorObject, "PJRT_Error").code


@entry_point("PJRT_Error_ForEachPayload")
def error_for_each_payload(args: Args) -> None:
    """PJRT_Error_ForEachPayload: pjrt-ref errors carry no payloads; the visitor is never called.

    (This one must not fail: frameworks call it while converting an error.)
    """
    handles.get(args.error, ErrorObject, "PJRT_Error")
