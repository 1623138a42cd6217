"""The slice of libnng (Debian's libnng1) the client needs, through ctypes:
a REQ socket, dial, send, receive with a timeout. No Python binding of nng is
packaged for Debian, so this is the binding; it holds no global state beyond
the loaded library."""
import ctypes
import ctypes.util

_lib = None


class _Socket(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint32)]


NNG_FLAG_ALLOC = 1
NNG_ETIMEDOUT = 5
NNG_ECONNREFUSED = 6
NNG_ECLOSED = 7
NNG_ENOENT = 12
NNG_EPERM = 16
NNG_DURATION_INFINITE = -1


def lib():
    """libnng, loaded once on first use."""
    global _lib
    if _lib is None:
        name = ctypes.util.find_library("nng") or "libnng.so.1"
        L = ctypes.CDLL(name)
        L.nng_req0_open.argtypes = [ctypes.POINTER(_Socket)]
        L.nng_dial.argtypes = [_Socket, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int]
        L.nng_socket_set_ms.argtypes = [_Socket, ctypes.c_char_p, ctypes.c_int32]
        L.nng_socket_set_size.argtypes = [_Socket, ctypes.c_char_p, ctypes.c_size_t]
        L.nng_send.argtypes = [_Socket, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        L.nng_recv.argtypes = [_Socket, ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.c_int]
        L.nng_free.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        L.nng_close.argtypes = [_Socket]
        L.nng_strerror.argtypes = [ctypes.c_int]
        L.nng_strerror.restype = ctypes.c_char_p
        _lib = L
    return _lib


class NngError(Exception):
    def __init__(self, rv, what):
        self.rv = rv
        super().__init__(f"{what}: {lib().nng_strerror(rv).decode()}")


class ReqSocket:
    """One nng REQ socket dialled to `url`; `timeout_ms` bounds each send and
    receive. Never resends on its own (a resent Step would train twice)."""

    def __init__(self, url, timeout_ms):
        L = lib()
        self._s = _Socket()
        rv = L.nng_req0_open(ctypes.byref(self._s))
        if rv:
            raise NngError(rv, "nng_req0_open")
        self._open = True
        L.nng_socket_set_ms(self._s, b"req:resend-time", NNG_DURATION_INFINITE)
        L.nng_socket_set_size(self._s, b"recv-size-max", 0)
        self.set_timeout(timeout_ms)
        rv = L.nng_dial(self._s, url.encode(), None, 0)
        if rv:
            self.close()
            raise NngError(rv, f"connect {url}")

    def set_timeout(self, timeout_ms):
        L = lib()
        L.nng_socket_set_ms(self._s, b"recv-timeout", int(timeout_ms))
        L.nng_socket_set_ms(self._s, b"send-timeout", int(timeout_ms))

    def call(self, data: bytes) -> bytes:
        L = lib()
        buf = ctypes.create_string_buffer(data, len(data))
        rv = L.nng_send(self._s, buf, len(data), 0)
        if rv:
            raise NngError(rv, "send")
        ptr = ctypes.c_void_p()
        size = ctypes.c_size_t()
        rv = L.nng_recv(self._s, ctypes.byref(ptr), ctypes.byref(size), NNG_FLAG_ALLOC)
        if rv:
            raise NngError(rv, "receive")
        try:
            return ctypes.string_at(ptr, size.value)
        finally:
            L.nng_free(ptr, size)

    def close(self):
        if getattr(self, "_open", False):
            lib().nng_close(self._s)
            self._open = False

    def __del__(self):
        self.close()
