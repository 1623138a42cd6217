"""dqnd.Client: one method per command of proto/dqnd/v1/dqnd.proto.

Arrays go in and come out as numpy arrays; their dtype and shape are checked
against the trainer's shapes before anything is sent (a wrong one raises
DqndError with code INVALID_ARGUMENT, naming the argument). The daemon's
errors raise DqndError with its gRPC code and message; a daemon that cannot
be reached raises DqndError with code UNAVAILABLE (DEADLINE_EXCEEDED on a
timeout). One Client is one nng REQ socket: use it from one thread at a time
(another Client may cancel its Step: cancel() with its pending_request_id).

Every request carries a deadline a little inside the client's timeout
(Request.timeout_ms = timeout - min(timeout/10, 1 s), as libdqnd): a Step
still running then stops between whole steps and answers with the steps that
ran (step()["stopped"], ["stop_reason"] "deadline"). Waiting for a reply
does not block Ctrl-C: a KeyboardInterrupt during step() cancels that Step on
the daemon (through a second connection) before it propagates, and a Step
that gets no reply in time is cancelled there before DEADLINE_EXCEEDED is
raised. Request ids start at a random value, so that a Cancel naming one
finds this client's Step and not another client's.
"""
import math
import os
import secrets
import stat
import tempfile
import zlib

import numpy as np

from . import _nng
from .v1 import dqnd_pb2 as pb

CODES = {0: "OK", 1: "CANCELLED", 2: "UNKNOWN", 3: "INVALID_ARGUMENT", 4: "DEADLINE_EXCEEDED", 5: "NOT_FOUND",
         6: "ALREADY_EXISTS", 7: "PERMISSION_DENIED", 8: "RESOURCE_EXHAUSTED", 9: "FAILED_PRECONDITION",
         10: "ABORTED", 11: "OUT_OF_RANGE", 12: "UNIMPLEMENTED", 13: "INTERNAL", 14: "UNAVAILABLE",
         15: "DATA_LOSS", 16: "UNAUTHENTICATED"}
CANCELLED, INVALID_ARGUMENT, DEADLINE_EXCEEDED, NOT_FOUND, UNAVAILABLE = 1, 3, 4, 5, 14
SCHEMES = ("ipc", "tcp", "tcp4", "tcp6", "tls+tcp", "tls+tcp4", "tls+tcp6")
CANCEL_TIMEOUT_S = 2.0  # the most a Cancel sent on the client's behalf waits (Ctrl-C, a Step's timeout)


class DqndError(Exception):
    """code: the gRPC code (int); name: its name; message: the daemon's (or
    this client's) message, which names the offending field."""

    def __init__(self, code, message, transport=False):
        self.code = int(code)
        self.name = CODES.get(self.code, str(code))
        self.message = message
        self.transport = bool(transport)  # no reply came (timeout, connection lost): not the daemon's answer
        super().__init__(f"{self.name}: {message}")


def url_scheme_error(url):
    """None when url has a scheme dqnd listens on, else why not (libdqnd's
    url_scheme_ok, client/dqnd.c: the same message)."""
    scheme, sep, _ = str(url).partition("://")
    if sep and scheme in SCHEMES:
        return None
    if not sep:
        return (f"url: '{url}' has no scheme: give ipc:///path/to/dqnd.sock, tcp://host:port or "
                "tls+tcp://host:port")
    return f"url: '{url}': the scheme '{scheme[:32]}' is not one dqnd listens on (ipc://, tcp://, tls+tcp://)"


def request_timeout_ms(timeout_ms):
    """Request.timeout_ms for a client waiting timeout_ms: a little inside it,
    so that a Step stopped by that deadline can still answer, with the steps
    that ran, before the client gives up (libdqnd's request_timeout)."""
    timeout_ms = int(timeout_ms)
    return max(timeout_ms - min(timeout_ms // 10, 1000), 1)


def default_url_own():
    """The per-user socket's path, the rule dqnd listens by (proto/dqnd/default_url.c)."""
    rd, xdg = os.environ.get("RUNTIME_DIRECTORY"), os.environ.get("XDG_RUNTIME_DIR")
    if rd:
        return f"{rd.split(':')[0]}/dqnd.sock"
    if xdg:
        return f"{xdg}/dqnd.sock"
    if os.geteuid() == 0:
        return "/run/dqnd/dqnd.sock"
    return f"/tmp/dqnd-{os.geteuid()}/dqnd.sock"


def default_url():
    """The daemon's embedded default socket, as dqnd and dqnctl find it:
    $DQND_URL, else the per-user socket, else the system service's."""
    env = os.environ.get("DQND_URL")
    if env:
        return env
    own = default_url_own()
    for path in (own, "/run/dqnd/dqnd.sock", "/run/dqnd/0/dqnd.sock"):
        try:
            os.stat(path)
            return "ipc://" + path
        except PermissionError:
            return "ipc://" + path  # there, but not ours: the dial says "permission denied"
        except OSError:
            continue
    return "ipc://" + own


def ipc_dir_check(url, strict_owner):
    """None when an ipc:// socket's directory is safe to use, else why not:
    the C library's dqnd_ipc_dir_check (proto/dqnd/default_url.c), the same
    rule. It, or a directory above it, sits in one every user may write (as
    /tmp) and is a symbolic link, not a directory, writable by others (a
    directory above may be sticky and ours, as /tmp is), or (strict_owner)
    not this user's or root's: another user could have put a socket there."""
    if not url.startswith("ipc://"):
        return None
    d = os.path.dirname(os.path.join(os.getcwd(), url[6:]))
    top = True
    while d:
        parent = os.path.dirname(d) or "/"
        try:
            world = os.stat(parent).st_mode & stat.S_IWOTH
        except OSError:
            world = 0
        if world:
            try:
                st = os.lstat(d)
            except FileNotFoundError:
                return None
            except OSError as e:
                return f"{d}: {e.strerror}"
            ours = st.st_uid in (os.geteuid(), 0)
            shared_ok = not top and st.st_mode & stat.S_ISVTX and ours
            why = ("a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a directory" if not stat.S_ISDIR(st.st_mode)
                   else "writable by others" if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not shared_ok
                   else "owned by another user" if strict_owner and not ours else None)
            if why:
                return (f"{d} (on the way to the socket, in {parent}, which every user may write) is {why}: another "
                        "user could have made it to catch this socket; remove it, or use a directory of yours")
        if parent == "/" or parent == d:
            return None
        d, top = parent, False
    return None


def _bad(arg, msg):
    return DqndError(INVALID_ARGUMENT, f"{arg}: {msg}")


def _floats(arg, x, shape):
    """x as contiguous little-endian float32 of `shape` (None = any size there)."""
    a = np.asarray(x)
    if a.dtype.kind not in "fiub":
        raise _bad(arg, f"dtype {a.dtype}, expected a numeric (float) array")
    if a.ndim != len(shape) or any(s is not None and s != d for s, d in zip(shape, a.shape)):
        want = "(" + ", ".join("n" if s is None else str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"
        raise _bad(arg, f"shape {a.shape}, expected {want}")
    return np.ascontiguousarray(a, dtype="<f4")


def _ints(arg, x, n, lo=-(1 << 63), hi=(1 << 63) - 1):
    a = np.asarray(x)
    if a.dtype.kind not in "iub":
        raise _bad(arg, f"dtype {a.dtype}, expected an integer array")
    if a.size and a.dtype.kind != "b":
        mn, mx = int(a.min()), int(a.max())
        if mn < lo or mx > hi:
            bad = mn if mn < lo else mx
            raise _bad(arg, f"{bad} is outside [{lo}, {hi}]")
    return a


def _stats(s):
    return {f.name: getattr(s, f.name) for f in s.DESCRIPTOR.fields}


def _info(t):
    return {"name": t.name, "backend": t.backend, "state": t.state, "queued": t.queued, "created": t.created,
            "config": {f.name: f.value for f in t.config}, "config_hash": t.config_hash,
            "stats": _stats(t.stats), "state_dim": t.state_dim, "branches": list(t.branches),
            "population": t.population or 1, "member": t.member}


def _uint(arg, v, bits=32):
    """an unsigned field's value, checked before anything is sent (the
    daemon checks its own bounds; this only what the wire cannot carry)"""
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 <= int(v) < 1 << bits:
        raise _bad(arg, f"{v!r} is not an integer in [0, 2^{bits})")
    return int(v)


def _member(member):
    """a population's member index, checked before anything is sent"""
    if isinstance(member, bool) or not isinstance(member, (int, np.integer)) or not 0 <= int(member) < 1 << 32:
        raise _bad("member", f"{member!r} is not an integer in [0, 2^32)")
    return int(member)


def _ckpt(c):
    return {"checkpoint": c.checkpoint, "seq": c.seq, "path": c.path, "bytes": c.bytes, "step": c.step,
            "crc32": c.crc32, "mtime": c.mtime_unix, "pinned": c.pinned}


class Client:
    """Client(url=None, timeout=60.0, token=None, tls_ca=None, tls_cert=None,
    tls_key=None, tls_server_name=None): url defaults to default_url();
    timeout is seconds per request; token the daemon's auth token (default
    $DQND_TOKEN). A tls+tcp:// url needs tls_ca, the PEM CA that signed the
    daemon's certificate (default $DQND_TLS_CA); tls_cert and tls_key are this
    client's certificate for a daemon with tls-verify-clients (default
    $DQND_TLS_CERT, $DQND_TLS_KEY); the daemon's certificate must carry
    tls_server_name (default: the url's host; mbed TLS matches DNS names, so
    give it for an IP address). A url without a scheme dqnd listens on
    (ipc://, tcp://, tls+tcp://) raises INVALID_ARGUMENT before any dial.

    pending_request_id: the id of the request in flight (or the last one
    sent), for another Client's cancel(name, request_id)."""

    def __init__(self, url=None, timeout=60.0, token=None, tls_ca=None, tls_cert=None, tls_key=None,
                 tls_server_name=None):
        self.url = url or default_url()
        self.timeout = float(timeout)
        self.token = token if token is not None else os.environ.get("DQND_TOKEN", "")
        self._next_id = secrets.randbits(62) | 1
        self.pending_request_id = 0
        self._instance = 0  # the daemon's Reply.instance, from the first reply
        self._shapes = {}
        self._sock = None
        why = url_scheme_error(self.url)
        if why:
            raise DqndError(INVALID_ARGUMENT, why)
        why = ipc_dir_check(self.url, strict_owner=self.url == "ipc://" + default_url_own())
        if why:
            raise DqndError(UNAVAILABLE, f"connect {self.url}: {why}")
        self._tls_args = {"tls_ca": tls_ca, "tls_cert": tls_cert, "tls_key": tls_key,
                          "tls_server_name": tls_server_name}
        try:
            tls = {"ca": tls_ca or os.environ.get("DQND_TLS_CA"), "cert": tls_cert or os.environ.get("DQND_TLS_CERT"),
                   "key": tls_key or os.environ.get("DQND_TLS_KEY"), "server_name": tls_server_name}
            self._sock = _nng.ReqSocket(self.url, int(self.timeout * 1000), tls)
        except ValueError as e:
            raise DqndError(INVALID_ARGUMENT, str(e)) from None
        except _nng.NngError as e:
            hint = ""
            if e.rv in (_nng.NNG_ENOENT, _nng.NNG_ECONNREFUSED):
                hint = " (is dqnd running?)"
            elif e.rv == _nng.NNG_EPERM:
                hint = " (the system service's socket is for group dqnd)"
            elif e.rv in (_nng.NNG_ECRYPTO, _nng.NNG_EPEERAUTH):
                hint = " (TLS: is the daemon's certificate signed by tls_ca and issued to the url's host?)"
            elif e.rv in (_nng.NNG_ECLOSED, _nng.NNG_ECONNSHUT) and self.url.startswith("tls+tcp://"):
                hint = " (the daemon closed the TLS handshake: does it require a client certificate?)"
            raise DqndError(UNAVAILABLE, f"{e}{hint}") from None

    def close(self):
        if getattr(self, "_sock", None):
            self._sock.close()
            self._sock = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---------------------------------------------------------------- plumbing

    def _new_id(self):
        rid = self._next_id
        self._next_id = self._next_id + 1 if self._next_id < (1 << 64) - 1 else 1
        return rid

    def _call(self, field, msg, keep=False):
        timeout_ms = int(self.timeout * 1000)
        req = pb.Request(version=1, request_id=self._new_id(), auth_token=self.token,
                         timeout_ms=request_timeout_ms(timeout_ms))
        getattr(req, field).CopyFrom(msg)
        if self._sock is None:
            raise DqndError(UNAVAILABLE, "the client is closed")
        self.pending_request_id = req.request_id
        try:
            raw = self._sock.call(req.SerializeToString(), keep=keep)
        except _nng.NngError as e:
            code = DEADLINE_EXCEEDED if e.rv == _nng.NNG_ETIMEDOUT else UNAVAILABLE
            raise DqndError(code, f"{self.url}: {e}", transport=True) from None
        rep = pb.Reply()
        try:
            rep.ParseFromString(raw)
        except Exception as e:  # protobuf's DecodeError (not a dqnd.v1.Reply): this client's error, not the caller's
            raise DqndError(13, f"{self.url}: the reply is not a dqnd.v1.Reply ({e})") from None
        if not rep.HasField("status"):
            raise DqndError(13, f"{self.url}: reply without a status")
        if rep.request_id != req.request_id:
            raise DqndError(13, f"reply for request {rep.request_id}, expected {req.request_id}")
        if rep.instance and self._instance and rep.instance != self._instance:
            # another daemon process answered (Reply.instance): said once, as libdqnd does
            self._instance = rep.instance
            raise DqndError(UNAVAILABLE, f"{self.url}: the daemon restarted (a new process answered): this request "
                            "ran there, on trainers restored from their last checkpoints; what they did after those "
                            "is gone, so resume from a checkpoint")
        if rep.instance:
            self._instance = rep.instance
        if rep.status.code:
            if rep.status.code in (NOT_FOUND, INVALID_ARGUMENT):  # gone, or its shapes may have changed
                self._shapes.pop(getattr(msg, "name", None), None)
            raise DqndError(rep.status.code, rep.status.message)
        return rep

    def _shape(self, name):
        """(state_dim, branches) of a trainer, asked once."""
        if name not in self._shapes:
            t = self.trainer_info(name)
            self._shapes[name] = (t["state_dim"], t["branches"])
        return self._shapes[name]

    # ---------------------------------------------------------------- commands

    def health(self):
        r = self._call("health", pb.Health()).health
        return {"serving": r.serving, "uptime_s": r.uptime_s}

    def server_info(self):
        r = self._call("server_info", pb.ServerInfo()).server_info
        return {f.name: getattr(r, f.name) for f in r.DESCRIPTOR.fields}

    def create_trainer(self, name, config=None, backend=None, population=1):
        """config: {field: value} (dqnctl fields lists them); values as text or
        numbers; branches as "9,3,3" or a list. population: N members of that
        config, member i seeded seed + i (docs/population.md); the commands
        about one member take member=i. Returns the trainer's info;
        info["created"] is False when it existed with the same config."""
        if isinstance(population, bool) or not isinstance(population, (int, np.integer)) or not 1 <= population <= 1024:
            raise _bad("population", f"{population!r} is not an integer in [1, 1024]")
        fields = []
        for k, v in (config or {}).items():
            if isinstance(v, (list, tuple)):
                v = ",".join(str(int(x)) for x in v)
            elif isinstance(v, bool):
                v = int(v)
            fields.append(pb.Field(name=str(k), value=str(v)))
        r = self._call("create_trainer", pb.CreateTrainer(name=name, config=fields, backend=backend or "",
                                                          population=int(population)))
        info = _info(r.trainer)
        self._shapes[name] = (info["state_dim"], info["branches"])
        return info

    def destroy_trainer(self, name, save=False):
        """Returns the final checkpoint's info when save, else None."""
        r = self._call("destroy_trainer", pb.DestroyTrainer(name=name, save_final=bool(save)))
        self._shapes.pop(name, None)
        return _ckpt(r.checkpoint) if r.WhichOneof("result") == "checkpoint" else None

    def list_trainers(self):
        return [_info(t) for t in self._call("list_trainers", pb.ListTrainers()).list.trainers]

    def trainer_info(self, name, member=0):
        """the trainer's info; in a population, member's (its seed and
        hyperparameters in config, its stats)"""
        return _info(self._call("get_stats", pb.GetStats(name=name, member=_member(member))).trainer)

    def stats(self, name, member=0):
        return self.trainer_info(name, member)["stats"]

    def submit(self, name, states, actions, rewards, next_states, dones, episode_ids=None, episode_ends=None,
               member=0):
        """states, next_states [n, state_dim] float; actions [n] flat joint
        actions (first branch most significant) or [n, branches] per-branch
        indices, integer; rewards [n] float; dones [n] 0/1; episode_ids [n]
        integer (optional); episode_ends [n] 0/1 (optional): 1 where an
        episode ends truncated (an episode also ends where done is 1; HER and
        n-step use the episodes); member: a population's member. Returns the
        replay's size after it."""
        member = _member(member)
        S, branches = self._shape(name)
        s = _floats("states", states, (None, S))
        n = s.shape[0]
        if n < 1:
            raise _bad("states", "no rows")
        s2 = _floats("next_states", next_states, (n, S))
        r = _floats("rewards", rewards, (n,))
        a = _ints("actions", actions, n, 0, (1 << 31) - 1)
        if a.ndim == 2 and a.shape == (n, len(branches)) and len(branches) > 1:
            flat = np.zeros(n, dtype=np.int64)
            for d, nd in enumerate(branches):
                col = a[:, d].astype(np.int64)
                if ((col < 0) | (col >= nd)).any():
                    i = int(np.argmax((col < 0) | (col >= nd)))
                    raise _bad("actions", f"[{i}][{d}]: {col[i]} is outside branch {d}'s [0, {nd})")
                flat = flat * nd + col
            a = flat
        elif a.shape != (n,):
            raise _bad("actions", f"shape {a.shape}, expected ({n},) flat or ({n}, {len(branches)}) per branch")
        d = np.asarray(dones)
        if d.shape != (n,):
            raise _bad("dones", f"shape {d.shape}, expected ({n},)")
        if d.dtype.kind not in "fiub" or not np.isin(d, (0, 1)).all():
            raise _bad("dones", "every flag must be 0 or 1")
        m = pb.SubmitTransitions(name=name, count=n, states=s.tobytes(), next_states=s2.tobytes(),
                                 actions=np.ascontiguousarray(a, dtype="<i4").tobytes(), rewards=r.tobytes(),
                                 dones=np.ascontiguousarray(d, dtype=np.uint8).tobytes(), member=member)
        if episode_ids is not None:
            e = _ints("episode_ids", episode_ids, n)
            if e.shape != (n,):
                raise _bad("episode_ids", f"shape {e.shape}, expected ({n},)")
            m.episode_ids = np.ascontiguousarray(e, dtype="<i8").tobytes()
        if episode_ends is not None:
            x = np.asarray(episode_ends)
            if x.shape != (n,):
                raise _bad("episode_ends", f"shape {x.shape}, expected ({n},)")
            if x.dtype.kind not in "fiub" or not np.isin(x, (0, 1)).all():
                raise _bad("episode_ends", "every flag must be 0 or 1")
            m.episode_ends = np.ascontiguousarray(x, dtype=np.uint8).tobytes()
        return self._call("submit_transitions", m).submit.replay_size

    def step(self, name, n=1):
        """n training steps (1..1,000,000); the stats of this call, and
        "stopped" (bool) and "stop_reason" ("" when all n ran, else
        "deadline", "cancelled" or "shutdown"): a Step stopped early ran
        stats["steps_run"] steps, and the trainer holds the state after
        exactly those. A Step that could not begin raises DEADLINE_EXCEEDED,
        CANCELLED or UNAVAILABLE. With no reply in time (or the connection
        lost) the Step is cancelled on the daemon before DqndError is raised,
        its message saying how that went; a KeyboardInterrupt (or SystemExit
        from a signal handler) while waiting cancels it too before it
        propagates, with a note saying how that went."""
        r = self._long_call(name, "step", pb.Step(name=name, n=_uint("n", n)), "Step").step
        out = _stats(r.stats)
        out["stopped"] = bool(r.stopped)
        out["stop_reason"] = (r.stop_reason or "stopped") if r.stopped else ""
        if len(r.members):  # a population: every member's stats, and the diverged ones
            out["members"] = [_stats(m) for m in r.members]
            out["diverged"] = list(r.diverged)
        return out

    def _long_call(self, name, field, msg, what):
        """A long command (Step, PretrainDT) that is cancelled on the daemon
        when this client stops waiting for it: on a KeyboardInterrupt (or
        SystemExit), and when no reply comes (transport errors)."""
        before = self.pending_request_id
        try:
            return self._call(field, msg, keep=True)
        except (KeyboardInterrupt, SystemExit) as e:  # Ctrl-C, or a signal handler that exits
            rid = self.pending_request_id
            if rid != before:  # it was sent (or about to be): stop it there; its id is never used again
                how, ok = self._cancel_abandoned(name, rid)
                if ok:  # a second Ctrl-C here gives the reply up (the receive cancelled) and propagates
                    self._settle_abandoned()
                if hasattr(e, "add_note"):
                    e.add_note(f"dqnd: the {what} (request {rid}) of trainer '{name}' was {how}")
            raise
        except DqndError as e:
            if not e.transport:
                raise
            how, ok = self._cancel_abandoned(name, self.pending_request_id)
            if ok:
                self._settle_abandoned()
            raise DqndError(e.code, f"{e.message} (the {what} was {how})", transport=True) from None

    def _settle_abandoned(self):
        """After a Cancel got through: the abandoned command's reply (CANCELLED,
        or what it did) lands before the caller hears of it, at most
        CANCEL_TIMEOUT_S later, so that closing the client never meets it in
        mid-receive (that can hang libnng 1.5: _nng.ReqSocket.settle)."""
        if self._sock is not None:
            self._sock.settle(int(CANCEL_TIMEOUT_S * 1000))

    def pretrain_dt(self, name, n=1):
        """n Decision Transformer pre-training steps (a trainer created with
        dt_layers >= 1; every member of a population its own) on windows of
        the whole ended episodes its replay holds: dt_step, steps_run,
        loss_mean, loss_last, grad_norm_mean, grad_norm_last (before the
        clip), lr (the warm-up's, at the last step), handed_over
        (dt_handover=trunk1 applied now), tokens_per_s, and "stopped" /
        "stop_reason" as step() gives them; a population adds "members",
        every member's stats. A replay with no whole ended episode, or a
        first step that draws no window, raises FAILED_PRECONDITION; a later
        step of a trainer of one that draws none ends the call with the steps
        that ran (stopped, stop_reason "no window"). Interrupted or unanswered, it is cancelled on
        the daemon as step() is."""
        r = self._long_call(name, "pretrain_dt", pb.PretrainDT(name=name, n=_uint("n", n)), "PretrainDT").pretrain_dt
        out = _stats(r.stats)
        out["tokens_per_s"] = r.tokens_per_s
        out["stopped"] = bool(r.stopped)
        out["stop_reason"] = (r.stop_reason or "stopped") if r.stopped else ""
        if len(r.members):
            out["members"] = [_stats(m) for m in r.members]
        return out

    def act_dt(self, name, states, rtg, timesteps, actions, member=0):
        """The action the Decision Transformer picks by return conditioning
        for the last step of a window: a live episode's last k steps
        (1..dt_context), oldest first, as states [k, state_dim], rtg [k] (the
        return still wanted, in reward units: subtract each reward received),
        timesteps [k] (>= 0) and actions [k] (the flat joint actions taken;
        the last one is the one being chosen and is not read). Returns an int."""
        member = _member(member)
        S, _ = self._shape(name)
        s = _floats("states", states, (None, S))
        k = s.shape[0]
        g = _floats("rtg", rtg, (k,))
        t = np.ascontiguousarray(_ints("timesteps", timesteps, k, 0, (1 << 31) - 1), dtype="<i4")
        a = np.ascontiguousarray(_ints("actions", actions, k, -(1 << 31), (1 << 31) - 1), dtype="<i4")
        if t.shape != (k,) or a.shape != (k,):
            raise _bad("timesteps" if t.shape != (k,) else "actions", f"shape {(t if t.shape != (k,) else a).shape}, "
                       f"expected ({k},)")
        r = self._call("act", pb.Act(name=name, count=k, states=s.tobytes(), policy="dt", rtg=g.tobytes(),
                                     timesteps=t.tobytes(), window_actions=a.tobytes(), member=member)).act
        if len(r.actions) != 4:
            raise DqndError(13, "Act (dt) answered with other than one action")
        return int(np.frombuffer(r.actions, dtype="<i4")[0])

    def cancel(self, name, request_id=0):
        """Stops trainer `name`'s Step of that request_id (another Client's
        pending_request_id), running or queued; request_id 0: whatever long
        command runs on the trainer now. Returns what was found: "running"
        (it stops between steps and answers its own client, stopped),
        "queued" (it answers CANCELLED without running) or "none"."""
        rep = self._call("cancel", pb.Cancel(name=name, request_id=_uint("request_id", request_id, 64)))
        if rep.WhichOneof("result") != "cancel":
            raise DqndError(13, f"{self.url}: Cancel answered without a CancelResult")
        return rep.cancel.found

    def _cancel_abandoned(self, name, request_id):
        """Cancels a Step whose reply this client no longer waits for, through
        a second connection (fails fast where the daemon is gone; this socket
        may wait for a reconnection), waiting at most CANCEL_TIMEOUT_S; says
        how it went, in words for a message, and whether the Cancel got
        through."""
        try:
            with Client(self.url, timeout=min(self.timeout, CANCEL_TIMEOUT_S), token=self.token,
                        **self._tls_args) as c:
                found = c.cancel(name, request_id)
        except DqndError as e:
            return f"left as it was: the Cancel did not get through either ({e})", False
        return ("already over on the daemon" if found == "none" else "cancelled on the daemon"), True

    def act(self, name, states, noisy=False, q=False, episode=0, q_var=False, member=0):
        """Greedy (or noisy) flat joint actions for states [n, state_dim]:
        int32 [n]; with q=True also each branch's Q values (the mean over
        ensemble heads), a list of float32 [n, n_d] arrays; with q_var=True
        too, a third item: their variance over heads in the same layout.
        episode: the episode the states belong to (act_select=thompson acts
        with that episode's head); member: a population's member."""
        member = _member(member)
        S, branches = self._shape(name)
        s = _floats("states", states, (None, S))
        if not isinstance(episode, (int, np.integer)) or not 0 <= int(episode) < 1 << 63:
            raise _bad("episode", f"{episode!r} is not an integer in [0, 2^63)")
        q = bool(q or q_var)
        r = self._call("act", pb.Act(name=name, count=s.shape[0], states=s.tobytes(), noisy=bool(noisy),
                                     want_q=q, episode=int(episode), member=member)).act
        n = s.shape[0]
        if len(r.actions) != 4 * n or (q and len(r.q) != 4 * n * sum(branches)):
            # another client recreated the trainer with other shapes: ask again
            self._shapes.pop(name, None)
            raise DqndError(9, f"name: trainer '{name}' changed shape since this client asked; call again")
        acts = np.frombuffer(r.actions, dtype="<i4").copy()
        if not q:
            return acts
        def split(raw):
            qa = np.frombuffer(raw, dtype="<f4").reshape(n, sum(branches))
            out, off = [], 0
            for nd in branches:
                out.append(qa[:, off:off + nd].copy())
                off += nd
            return out
        if q_var:
            if len(r.q_var) != len(r.q):
                raise DqndError(13, "q_var: the daemon's Act reply has no variance (an older daemon?)")
            return acts, split(r.q), split(r.q_var)
        return acts, split(r.q)

    def sync_target(self, name, tau=0.0, member=0):
        """tau = 0: hard copy; else target = tau x online + (1 - tau) x target."""
        self._call("sync_target", pb.SyncTarget(name=name, tau=float(tau), member=_member(member)))

    def set_hyperparams(self, name, member=0, **fields):
        """set_hyperparams("t", lr=1e-4, gamma=0.98): all or nothing;
        member: a population's member."""
        member = _member(member)
        if not fields:
            raise _bad("hparams", "no fields given")
        hp = [pb.Field(name=k, value=str(v)) for k, v in fields.items()]
        return _info(self._call("set_hyperparams", pb.SetHyperparams(name=name, hparams=hp, member=member)).trainer)

    def copy_member(self, name, dst, src, with_replay=False, **factors):
        """Exploit and explore in a population: member dst becomes a copy of
        member src (network, Adam moments, counters; its replay too with
        with_replay), keeps its seed, and takes src's hyperparameters, each
        float one named in factors multiplied by its factor:
        copy_member("pop", 3, 0, lr=0.8). Returns dst's info."""
        f = []
        for k, v in factors.items():
            try:  # float() of a huge int overflows
                ok = not isinstance(v, bool) and isinstance(v, (int, float, np.integer, np.floating)) and \
                    math.isfinite(float(v))
            except OverflowError:
                ok = False
            if not ok:
                raise _bad("factors", f"{k} = {v!r} is not a finite number")
            f.append(pb.Field(name=k, value=repr(float(v))))
        m = pb.CopyMember(name=name, dst=_member(dst), src=_member(src), with_replay=bool(with_replay), factors=f)
        return _info(self._call("copy_member", m).trainer)

    def save_checkpoint(self, name, with_replay=False, pin=False):
        """A checkpoint written on the daemon now. pin: the trainer's resume
        point, kept besides the daemon's newest keep-checkpoints until the
        trainer's next pinned one (periodic and final saves do not prune it)."""
        return _ckpt(self._call("save_checkpoint", pb.SaveCheckpoint(name=name, with_replay=bool(with_replay),
                                                                     pin=bool(pin))).checkpoint)

    def list_checkpoints(self, name):
        return [_ckpt(c) for c in self._call("list_checkpoints", pb.ListCheckpoints(name=name)).checkpoints.checkpoints]

    def fetch_checkpoint(self, name, path, checkpoint="", chunk_bytes=4 << 20, member=None):
        """Downloads a checkpoint (newest, or its id / short id) to `path`:
        into a temporary file beside it, CRC-checked, renamed over `path` only
        when complete, so a failed fetch leaves `path` as it was. member: of
        a population's checkpoint, that member's state alone (a lone
        trainer's checkpoint)."""
        one = member is not None
        member = _member(member) if one else 0
        d = os.path.dirname(os.path.abspath(path))
        fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".part-", dir=d)
        ok = False
        try:
            with os.fdopen(fd, "wb") as f:
                off, total, crc, want, ck = 0, None, 0, None, str(checkpoint or "")
                while total is None or off < total:
                    c = self._call("fetch_checkpoint", pb.FetchCheckpoint(name=name, checkpoint=ck, offset=off,
                                                                          max_bytes=chunk_bytes, member=member,
                                                                          member_only=one)).chunk
                    if c.offset != off or (not c.data and off < c.total):
                        raise DqndError(13, "FetchCheckpoint reply out of order")
                    if total is None:  # the first chunk fixes the file; later ones must agree and fit in it
                        ck, total, want = c.checkpoint, c.total, c.crc32
                    elif (c.checkpoint, c.total, c.crc32) != (ck, total, want):
                        raise DqndError(13, f"FetchCheckpoint chunk at {off} is of another file")
                    if len(c.data) > total - off or (chunk_bytes and len(c.data) > chunk_bytes):
                        raise DqndError(13, f"FetchCheckpoint chunk of {len(c.data)} bytes at {off} of {total}")
                    f.write(c.data)
                    crc = zlib.crc32(c.data, crc)
                    off += len(c.data)
                if crc != want:
                    raise DqndError(15, f"checkpoint {ck}: CRC-32 {crc:08x}, expected {want:08x}")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            ok = True
            return {"checkpoint": ck, "path": path, "bytes": total, "crc32": crc}
        finally:
            if not ok:
                os.unlink(tmp)

    def load_checkpoint(self, name, path=None, file=None, create=False, backend=None, chunk_bytes=None,
                        member=None):
        """From a file on the daemon's side (path) or a local file uploaded in
        chunks (file) of chunk_bytes (None: 4 MiB, or less where the daemon's
        max_message_bytes needs it); into a new trainer (create=True) or an
        existing one.
        member: a lone trainer's state (one member's, as fetch_checkpoint
        member= gives it) into that member of the existing population `name`,
        which keeps its seed; returns that member's info."""
        if (path is None) == (file is None):
            raise _bad("path", "give one of path (on the daemon) or file (local)")
        one = member is not None
        member = _member(member) if one else 0
        if not one:
            self._shapes.pop(name, None)
        if path is not None:
            r = self._call("load_checkpoint", pb.LoadCheckpoint(name=name, path=path, create=bool(create),
                                                                backend=backend or "", member=member,
                                                                member_only=one))
            return _info(r.trainer)
        with open(file, "rb") as f:
            data = f.read()
        if not data:
            raise _bad("file", f"{file} is empty")
        if chunk_bytes is None:  # within the daemon's request limit, with 4 KB for the rest of the request
            mm = self.server_info().get("max_message_bytes", 0)
            chunk_bytes = min(4 << 20, mm - 4096 if mm > 8192 else max(mm // 2, 1)) if mm else 4 << 20
        if isinstance(chunk_bytes, bool) or not isinstance(chunk_bytes, (int, np.integer)) or chunk_bytes < 1:
            raise _bad("chunk_bytes", f"{chunk_bytes!r} is not a positive integer")
        crc, off, r = zlib.crc32(data), 0, None
        while off < len(data):
            chunk = data[off:off + chunk_bytes]
            r = self._call("load_checkpoint", pb.LoadCheckpoint(
                name=name, create=bool(create), backend=backend or "", data=chunk, offset=off, total=len(data),
                last=off + len(chunk) == len(data), crc32=crc, member=member, member_only=one))
            off += len(chunk)
        return _info(r.trainer)
