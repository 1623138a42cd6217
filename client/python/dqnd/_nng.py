"""The slice of libnng (Debian's libnng1) the client needs, through ctypes:
a REQ socket, dial, and one request and its reply with a timeout. No Python
binding of nng is packaged for Debian, so this is the binding; it holds no
global state beyond the loaded libraries.

The wait for a reply must not block Ctrl-C, and nng 1.5.2's REQ socket
cannot wait in short slices: a receive that times out resets the request
(req0_ctx_cancel_recv), so the next receive never gets its reply. Each
socket therefore sends and receives through an nng aio whose completion
callback is libc's sem_post on a semaphore of the socket's own (no Python
code runs on nng's threads), and the calling thread waits on that semaphore
in slices of WAIT_SLICE_S: between two slices Python runs its signal
handlers, so a KeyboardInterrupt comes within a fraction of a second (a
signal also ends the slice at once: sem_clockwait returns EINTR). An
interrupted call cancels its operation and leaves the socket ready for the
next request."""
import ctypes
import ctypes.util
import errno
import os
import threading
import time

_lib = None
_libc = None
WAIT_SLICE_S = 0.1
SETTLE_ON_CLOSE_MS = 2000  # close(): how long a timed-out call's late reply may take to land


class _Socket(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint32)]


class _Dialer(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint32)]


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


NNG_FLAG_ALLOC = 1
NNG_FLAG_NONBLOCK = 2
NNG_EAGAIN = 8
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
CLOCK_MONOTONIC = 1


def lib():
    """libnng, loaded once on first use."""
    global _lib
    if _lib is None:
        name = ctypes.util.find_library("nng") or "libnng.so.1"
        L = ctypes.CDLL(name)
        vp, cp, sz = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t
        L.nng_req0_open.argtypes = [ctypes.POINTER(_Socket)]
        L.nng_dial.argtypes = [_Socket, cp, vp, ctypes.c_int]
        L.nng_socket_set_ms.argtypes = [_Socket, cp, ctypes.c_int32]
        L.nng_socket_set_size.argtypes = [_Socket, cp, sz]
        L.nng_close.argtypes = [_Socket]
        L.nng_send.argtypes = [_Socket, vp, sz, ctypes.c_int]
        L.nng_strerror.argtypes = [ctypes.c_int]
        L.nng_strerror.restype = cp
        L.nng_aio_alloc.argtypes = [ctypes.POINTER(vp), vp, vp]
        for f in ("nng_aio_free", "nng_aio_stop", "nng_aio_cancel", "nng_aio_wait"):
            getattr(L, f).argtypes = [vp]
            getattr(L, f).restype = None
        L.nng_aio_result.argtypes = [vp]
        L.nng_aio_result.restype = ctypes.c_int
        L.nng_aio_set_timeout.argtypes = [vp, ctypes.c_int32]
        L.nng_aio_set_timeout.restype = None
        L.nng_aio_set_msg.argtypes = [vp, vp]
        L.nng_aio_set_msg.restype = None
        L.nng_aio_get_msg.argtypes = [vp]
        L.nng_aio_get_msg.restype = vp
        L.nng_send_aio.argtypes = [_Socket, vp]
        L.nng_send_aio.restype = None
        L.nng_recv_aio.argtypes = [_Socket, vp]
        L.nng_recv_aio.restype = None
        L.nng_msg_alloc.argtypes = [ctypes.POINTER(vp), sz]
        L.nng_msg_body.argtypes = [vp]
        L.nng_msg_body.restype = vp
        L.nng_msg_len.argtypes = [vp]
        L.nng_msg_len.restype = sz
        L.nng_msg_free.argtypes = [vp]
        L.nng_msg_free.restype = None
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


def libc():
    """libc's POSIX semaphores: sem_post is the aios' completion callback."""
    global _libc
    if _libc is None:
        C = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        vp = ctypes.c_void_p
        C.sem_init.argtypes = [vp, ctypes.c_int, ctypes.c_uint]
        C.sem_destroy.argtypes = [vp]
        C.sem_trywait.argtypes = [vp]
        C.sem_timedwait.argtypes = [vp, ctypes.POINTER(_Timespec)]
        try:  # glibc 2.30: the monotonic clock, so a change of the wall clock cannot stretch a slice
            C.sem_clockwait.argtypes = [vp, ctypes.c_int, ctypes.POINTER(_Timespec)]
            C.has_clockwait = True
        except AttributeError:
            C.has_clockwait = False
        _libc = C
    return _libc


class NngError(Exception):
    def __init__(self, rv, what):
        self.rv = rv
        super().__init__(f"{what}: {lib().nng_strerror(rv).decode()}")


class ReqSocket:
    """One nng REQ socket dialled to `url`; `timeout_ms` bounds each send and
    each receive (as libdqnd's socket timeouts). Never resends on its own (a
    resent Step would train twice). call() may be interrupted (Ctrl-C) at any
    time; the socket stays usable. Calls from several threads take turns;
    close() from another thread ends a call in flight (ECLOSED)."""

    def __init__(self, url, timeout_ms, tls=None):
        L = lib()
        self._pending = False  # a reply left in flight by call(keep=True) that timed out (settle())
        self._s = _Socket()
        self._lock = threading.Lock()  # held by call(): close() frees the aio only once no call uses it
        self._aio = ctypes.c_void_p()
        # a sem_t is 32 bytes on every glibc target; room and alignment to spare
        self._sem = (ctypes.c_uint64 * 8)()
        rv = L.nng_req0_open(ctypes.byref(self._s))
        if rv:
            raise NngError(rv, "nng_req0_open")
        self._open = True
        if libc().sem_init(self._sem, 0, 0):
            e = ctypes.get_errno()
            self.close()
            raise OSError(e, "sem_init: " + os.strerror(e))
        self._sem_ok = True
        post = ctypes.cast(libc().sem_post, ctypes.c_void_p)
        rv = L.nng_aio_alloc(ctypes.byref(self._aio), post, ctypes.cast(self._sem, ctypes.c_void_p))
        if rv:
            self._aio = ctypes.c_void_p()
            self.close()
            raise NngError(rv, "nng_aio_alloc")
        L.nng_socket_set_ms(self._s, b"req:resend-time", NNG_DURATION_INFINITE)
        L.nng_socket_set_size(self._s, b"recv-size-max", 0)
        self.set_timeout(timeout_ms)
        if url.startswith("tls+"):
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
        host = url.split("://", 1)[1]
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
        self.timeout_ms = int(timeout_ms)
        L = lib()
        L.nng_socket_set_ms(self._s, b"recv-timeout", self.timeout_ms)  # the TLS dial's handshake
        L.nng_socket_set_ms(self._s, b"send-timeout", self.timeout_ms)
        L.nng_aio_set_timeout(self._aio, self.timeout_ms)  # each operation on the aio (it keeps it)

    def _wait(self, deadline=None):
        """Until the aio's callback has posted the semaphore, in slices: Python
        runs signal handlers (KeyboardInterrupt) between them. With deadline
        (time.monotonic()), False once it has passed with the operation still
        in flight; else True."""
        C = libc()
        ts = _Timespec()
        clockwait = C.has_clockwait
        while True:
            slice_s = WAIT_SLICE_S
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:  # one last look
                    if C.sem_trywait(self._sem) == 0:
                        lib().nng_aio_wait(self._aio)
                        return True
                    return False
                slice_s = min(slice_s, left)
            t = (time.clock_gettime(time.CLOCK_MONOTONIC) if clockwait else time.time()) + slice_s
            ts.tv_sec, ts.tv_nsec = int(t), int((t % 1) * 1e9)
            if clockwait:
                rv = C.sem_clockwait(self._sem, CLOCK_MONOTONIC, ctypes.byref(ts))
            else:
                rv = C.sem_timedwait(self._sem, ctypes.byref(ts))
            if rv == 0:
                lib().nng_aio_wait(self._aio)  # the callback has returned: the aio may start again
                return True
            e = ctypes.get_errno()
            if e not in (errno.ETIMEDOUT, errno.EINTR):
                raise OSError(e, "sem_clockwait: " + os.strerror(e))

    def _abort(self):
        """Cancels the aio's operation (a request in flight is abandoned: its
        reply, if one comes, is dropped) and frees a message left in it."""
        L = lib()
        L.nng_aio_cancel(self._aio)
        L.nng_aio_wait(self._aio)
        while libc().sem_trywait(self._sem) == 0:  # the cancelled operation's post
            pass
        m = L.nng_aio_get_msg(self._aio)
        if m:
            L.nng_aio_set_msg(self._aio, None)
            L.nng_msg_free(m)

    def _send_waiting(self, data):
        """Sends when no connection takes the request at once (the daemon
        restarting, a dial still under way): on the aio, so it can be
        interrupted; the message stays ours when it fails."""
        L = lib()
        m = ctypes.c_void_p()
        rv = L.nng_msg_alloc(ctypes.byref(m), len(data))
        if rv:
            raise NngError(rv, "send")
        ctypes.memmove(L.nng_msg_body(m), data, len(data))
        L.nng_aio_set_msg(self._aio, m)
        L.nng_send_aio(self._s, self._aio)
        self._wait()
        rv = L.nng_aio_result(self._aio)
        if rv:
            m = L.nng_aio_get_msg(self._aio)
            L.nng_aio_set_msg(self._aio, None)
            if m:
                L.nng_msg_free(m)
            raise NngError(rv, "send")

    def call(self, data: bytes, keep=False) -> bytes:
        """Sends one request and returns its reply; the socket's timeout bounds
        the send and the receive each. A KeyboardInterrupt while it waits
        abandons the request and propagates; the socket stays usable. With
        keep, a receive that times out (NngError ETIMEDOUT) or is interrupted
        stays in flight for the late reply, which settle() then takes (or
        gives up on); the next call gives up on it first."""
        with self._lock:
            if not self._open:
                raise NngError(NNG_ECLOSED, "send")
            if self._pending:
                self._settle(0)
            return self._call(data, keep)

    @property
    def in_flight(self):
        """True while a timed-out call(keep=True)'s reply may still come."""
        return self._pending

    def settle(self, timeout_ms):
        """Waits up to timeout_ms for the reply a timed-out call(keep=True)
        left in flight and drops it, or gives up on it (the receive
        cancelled); True when it came (False too where the receive failed:
        the connection lost). Closing the socket while that reply
        is being received can hang libnng 1.5's pipe teardown forever (its
        IPC and TCP pipes restart a read on a pipe already closing), so a
        client lets such a reply land before close() (which settles too).
        None when nothing was in flight."""
        with self._lock:
            if not self._open:
                return None
            return self._settle(timeout_ms)

    def _settle(self, timeout_ms):
        if not self._pending:
            return None
        L = lib()
        try:
            came = self._wait(time.monotonic() + max(timeout_ms, 0) / 1000.0)
        except BaseException:
            self._abort()
            self._pending = False
            L.nng_aio_set_timeout(self._aio, self.timeout_ms)
            raise
        if came:
            came = L.nng_aio_result(self._aio) == 0  # else the pipe closed under it: no reply
            m = L.nng_aio_get_msg(self._aio)
            L.nng_aio_set_msg(self._aio, None)
            if m:
                L.nng_msg_free(m)
        else:
            self._abort()
        self._pending = False
        L.nng_aio_set_timeout(self._aio, self.timeout_ms)
        return came

    def _call(self, data, keep=False):
        L = lib()
        aio = self._aio
        receiving = False
        try:
            # the usual case: a connection takes it now (req0 fails a non-blocking send only when none is ready)
            rv = L.nng_send(self._s, data, len(data), NNG_FLAG_NONBLOCK)
            if rv == NNG_EAGAIN:
                self._send_waiting(data)
            elif rv:
                raise NngError(rv, "send")
            if keep:  # this wait's own deadline, the aio's none: on the deadline the receive stays in flight
                L.nng_aio_set_timeout(aio, NNG_DURATION_INFINITE)
                L.nng_recv_aio(self._s, aio)
                receiving = True
                if not self._wait(time.monotonic() + self.timeout_ms / 1000.0):
                    self._pending = True
                    raise NngError(NNG_ETIMEDOUT, "receive")
                L.nng_aio_set_timeout(aio, self.timeout_ms)
            else:
                L.nng_recv_aio(self._s, aio)
                self._wait()
        except NngError as e:
            if e.rv == NNG_ETIMEDOUT and self._pending:
                raise
            self._abort()
            L.nng_aio_set_timeout(aio, self.timeout_ms)
            raise
        except BaseException:  # KeyboardInterrupt (or another signal handler's exception) during a wait
            if keep and receiving:  # the receive stays in flight for its late reply, as on a timeout (settle)
                self._pending = True
                raise
            self._abort()
            L.nng_aio_set_timeout(aio, self.timeout_ms)
            raise
        rv = L.nng_aio_result(aio)
        if rv:
            raise NngError(rv, "receive")
        r = L.nng_aio_get_msg(aio)
        L.nng_aio_set_msg(aio, None)
        try:
            return ctypes.string_at(L.nng_msg_body(r), L.nng_msg_len(r))
        finally:
            L.nng_msg_free(r)

    def close(self):
        if not getattr(self, "_open", False):
            return
        # a timed-out call's reply still in flight: let it land first (settle);
        # the socket closes whatever happens there (a KeyboardInterrupt included)
        try:
            if self._pending and self._lock.acquire(timeout=5):
                try:
                    if self._pending and self._open:
                        self._settle(SETTLE_ON_CLOSE_MS)
                finally:
                    self._lock.release()
        finally:
            self._close_now()

    def _close_now(self):
        self._open = False
        L = lib()
        L.nng_close(self._s)  # a call in flight in another thread ends now, with ECLOSED
        if not self._aio:
            return
        # the aio and the semaphore go once no call uses them; a call that does
        # not leave (close() from a signal handler inside it) keeps them: leaked, never freed under it
        if self._lock.acquire(timeout=5):
            try:
                L.nng_aio_free(self._aio)  # stops it first
                self._aio = ctypes.c_void_p()
                if getattr(self, "_sem_ok", False):
                    libc().sem_destroy(self._sem)
                    self._sem_ok = False
            finally:
                self._lock.release()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 (at interpreter exit the modules it needs may be gone)
            pass
