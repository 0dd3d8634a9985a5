"""The framework's key-value store, from PJRT_Client_Create's callbacks.

pjrt_c_api.h: the caller of PJRT_Client_Create may pass `kv_get_callback`,
`kv_try_get_callback` and `kv_put_callback` (each with its `user_arg`),
which reach a store shared by all processes of the job (JAX: its
distributed runtime's). The callbacks are thread-safe; get blocks up to
`timeout_in_ms`; a failing callback returns a `PJRT_Error*` it made with
the `PJRT_CallbackError` we pass, which we own and free. A value the
store returns is ours to copy, then to free with the deleter it names.

`CallbackKeyValueStore` offers them as the `KeyValueStore` of
`pjrt_ref/distributed/kv_store.py`.
"""
from __future__ import annotations

from pjrt_ref.capi import handles
from pjrt_ref.errors import ErrorCode, PjrtRefError
from pjrt_ref.capi import cdata
from pjrt_ref.capi.cdata import ErrorObject
from pjrt_ref.capi.host_callbacks import callback_error_pointer


class CallbackKeyValueStore:
    """Get, try-get and put through the caller's C callbacks."""

    def __init__(self, args) -> None:
        ffi, null = cdata.ffi, cdata.NULL
        self._get = ffi.cast("PJRT_KeyValueGetCallback", args.kv_get_callback)
        self._get_arg = args.kv_get_user_arg
        self._put = ffi.cast("PJRT_KeyValuePutCallback", args.kv_put_callback)
        self._put_arg = args.kv_put_user_arg
        try_get = args.get("kv_try_get_callback", null)
        self._try_get = ffi.cast("PJRT_KeyValueTryGetCallback", try_get) if try_get != null else None
        self._try_get_arg = args.get("kv_try_get_user_arg", null)

    @staticmethod
    def given(args) -> bool:
        """Whether the Create Args carry the get and put callbacks."""
        return args.kv_get_callback != cdata.NULL and args.kv_put_callback != cdata.NULL

    def get(self, key: str, timeout_seconds: float) -> bytes:
        call, key_data = self._new_call("PJRT_KeyValueGetCallback_Args", key, self._get_arg)
        call.timeout_in_ms = int(min(timeout_seconds * 1000, 2**31 - 1))
        self._check(self._get(call), f"get {key!r}")
        return self._take_value(call)

    def try_get(self, key: str) -> bytes | None:
        if self._try_get is None:       # an older caller: a get that does not wait
            try:
                return self.get(key, 0.0)
            except PjrtRefError:
                return None
        call, key_data = self._new_call("PJRT_KeyValueTryGetCallback_Args", key, self._try_get_arg)
        error = self._try_get(call)
        if error != cdata.NULL:
            taken = _taken(error)
            if taken.code == ErrorCode.NOT_FOUND:
                return None
            raise _exception(taken, f"try_get {key!r}")
        return self._take_value(call)

    def put(self, key: str, value: bytes) -> None:
        call, key_data = self._new_call("PJRT_KeyValuePutCallback_Args", key, self._put_arg)
        value_data = cdata.ffi.new("char[]", bytes(value))
        call.value, call.value_size = value_data, len(value)
        self._check(self._put(call), f"put {key!r}")

    # -- helpers --------------------------------------------------------------------
    @staticmethod
    def _new_call(struct: str, key: str, user_arg):
        ffi = cdata.ffi
        call = ffi.new(struct + "*")
        call.struct_size = ffi.sizeof(struct)
        key_data = ffi.new("char[]", key.encode())
        call.key, call.key_size = key_data, len(key.encode())
        call.callback_error = callback_error_pointer()
        call.user_arg = user_arg
        return call, key_data

    @staticmethod
    def _check(error, what: str) -> None:
        if error != cdata.NULL:
            raise _exception(_taken(error), what)

    @staticmethod
    def _take_value(call) -> bytes:
        value = cdata.ffi.unpack(call.value, call.value_size)
        if call.value_deleter_callback != cdata.NULL:
            call.value_deleter_callback(call.value)
        return value


def _taken(error) -> ErrorObject:
    """The `PJRT_Error*` a callback returned (made by our PJRT_CallbackError), now freed."""
    return handles.remove(error, ErrorObject, "PJRT_Error returned by a key-value callback")


def _exception(error: ErrorObject, what: str) -> PjrtRefError:
    exc = PjrtRefError(f"the framework's key-value store: {what} failed: {error.message}")
    exc.code = ErrorCode(error.code)
    return exc
