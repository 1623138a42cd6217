"""The slice of libnng (Debian's libnng1) the client needs, through ctypes:
a REQ socket, dial, send, receive with a timeout. No Python binding of nng is
packaged for Debian, so this is the binding; it holds no global state beyond
the loaded library."""
import ctypes
import ctypes.util
import os

_lib = None


class _Socket(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint32)]


class _Dialer(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint32)]


NNG_FLAG_ALLOC = 1
NNG_ETIMEDOUT = 5
NNG_ECONNREFUSED = 6
NNG_ECLOSED = 7
NNG_ENOENT = 12
NNG_EPERM = 16
NNG_DURATION_INFINITE = -1
NNG_ECONNSHUT = 31
NNG_ECRYPTO = 26
NNG_EPEERAUTH = 27
NNG_TLS_MODE_CLIENT = 0
NNG_TLS_AUTH_MODE_REQUIRED = 2


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
        vp, cp = ctypes.c_void_p, ctypes.c_char_p
        L.nng_dialer_create.argtypes = [ctypes.POINTER(_Dialer), _Socket, cp]
        L.nng_dialer_set_ptr.argtypes = [_Dialer, cp, vp]
        L.nng_dialer_start.argtypes = [_Dialer, ctypes.c_int]
        L.nng_tls_config_alloc.argtypes = [ctypes.POINTER(vp), ctypes.c_int]
        L.nng_tls_config_free.argtypes = [vp]
        L.nng_tls_config_ca_file.argtypes = [vp, cp]
        L.nng_tls_config_own_cert.argtypes = [vp, cp, cp, cp]
        L.nng_tls_config_auth_mode.argtypes = [vp, ctypes.c_int]
        L.nng_tls_config_server_name.argtypes = [vp, cp]
        _lib = L
    return _lib


class NngError(Exception):
    def __init__(self, rv, what):
        self.rv = rv
        super().__init__(f"{what}: {lib().nng_strerror(rv).decode()}")


class ReqSocket:
    """One nng REQ socket dialled to `url`; `timeout_ms` bounds each send and
    receive. Never resends on its own (a resent Step would train twice)."""

    def __init__(self, url, timeout_ms, tls=None):
        L = lib()
        self._s = _Socket()
        rv = L.nng_req0_open(ctypes.byref(self._s))
        if rv:
            raise NngError(rv, "nng_req0_open")
        self._open = True
        L.nng_socket_set_ms(self._s, b"req:resend-time", NNG_DURATION_INFINITE)
        L.nng_socket_set_size(self._s, b"recv-size-max", 0)
        self.set_timeout(timeout_ms)
        if url.startswith("tls+tcp://"):
            try:
                self._dial_tls(url, tls or {})
            except BaseException:
                self.close()
                raise
            return
        rv = L.nng_dial(self._s, url.encode(), None, 0)
        if rv:
            self.close()
            raise NngError(rv, f"connect {url}")

    def _dial_tls(self, url, tls):
        """tls: ca (required: the PEM CA that signed the daemon's certificate),
        cert and key (this client's, for a daemon with tls-verify-clients),
        server_name (default: the URL's host). As libdqnd (proto/dqnd/tls.c)."""
        L = lib()
        ca, cert, key = tls.get("ca"), tls.get("cert"), tls.get("key")
        if not ca:
            raise ValueError("tls_ca: a TLS client needs the CA that signed the daemon's certificate")
        if bool(cert) != bool(key):
            raise ValueError("tls_cert and tls_key: give both or neither")
        host = url[len("tls+tcp://"):]
        host = host[1:host.index("]")] if host.startswith("[") else host.split(":")[0].split("/")[0]
        cfg = ctypes.c_void_p()
        rv = L.nng_tls_config_alloc(ctypes.byref(cfg), NNG_TLS_MODE_CLIENT)
        if rv:
            raise NngError(rv, "tls")
        try:
            rv = L.nng_tls_config_ca_file(cfg, os.fsencode(ca))
            if rv:
                raise ValueError(f"tls_ca: {ca}: cannot read it or not a PEM CA certificate")
            if cert:
                with open(cert, "rb") as f:
                    c = f.read()
                with open(key, "rb") as f:
                    k = f.read()
                rv = L.nng_tls_config_own_cert(cfg, c, k, None)
                if rv:
                    raise ValueError(f"tls_cert/tls_key: {cert} and {key} are not a matching PEM certificate "
                                     "and unencrypted key")
            L.nng_tls_config_auth_mode(cfg, NNG_TLS_AUTH_MODE_REQUIRED)
            L.nng_tls_config_server_name(cfg, (tls.get("server_name") or host).encode())
            d = _Dialer()
            rv = L.nng_dialer_create(ctypes.byref(d), self._s, url.encode())
            if not rv:
                rv = L.nng_dialer_set_ptr(d, b"tls-config", cfg)
            if not rv:
                rv = L.nng_dialer_start(d, 0)
            if rv:
                raise NngError(rv, f"connect {url}")
        finally:
            L.nng_tls_config_free(cfg)

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
