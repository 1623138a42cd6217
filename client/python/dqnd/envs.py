"""The built-in environments, reachable from Python: the same C code that
`dqnctl demo` and the learning test run (libdqnenv, loaded with ctypes).
They follow Gymnasium's small protocol — reset(seed=None) -> (obs, info),
step(action) -> (obs, reward, terminated, truncated, info) — so a user's own
Gymnasium environment drops into the same driver code."""
import ctypes
import os

import numpy as np

_lib = None


def _load():
    global _lib
    if _lib is None:
        here = os.path.dirname(os.path.abspath(__file__))
        names = [os.path.join(here, "libdqnpyenv.so"), "libdqnpyenv.so"]
        err = None
        for n in names:
            try:
                _lib = ctypes.CDLL(n)
                break
            except OSError as e:
                err = e
        if _lib is None:
            raise OSError(f"libdqnpyenv.so not found beside {here} ({err})")
        L = _lib
        L.dqnenv_meanrev_size.restype = ctypes.c_size_t
        L.dqnenv_meanrev_spec.argtypes = [ctypes.POINTER(ctypes.c_int)] * 3 + [ctypes.POINTER(ctypes.c_int32)]
        L.dqnenv_meanrev_reset.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_void_p]
        L.dqnenv_meanrev_step.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.POINTER(ctypes.c_float),
                                          ctypes.c_void_p]
        L.dqnenv_meanrev_optimal_action.argtypes = [ctypes.c_void_p]
        L.dqnenv_meanrev_optimal_action.restype = ctypes.c_int32
        L.dqnenv_meanrev_reward.argtypes = [ctypes.c_void_p, ctypes.c_int32]
        L.dqnenv_meanrev_reward.restype = ctypes.c_float
        L.dqnenv_meanrev_config.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        L.dqnenv_meanrev_config.restype = ctypes.c_size_t
        L.dqnenv_deepsea_size.restype = ctypes.c_size_t
        L.dqnenv_deepsea_init.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64]
        L.dqnenv_deepsea_reset.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        L.dqnenv_deepsea_step.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.POINTER(ctypes.c_float),
                                          ctypes.c_void_p]
        L.dqnenv_deepsea_right_action.argtypes = [ctypes.c_void_p]
        L.dqnenv_deepsea_right_action.restype = ctypes.c_int32
        L.dqnenv_deepsea_config.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
        L.dqnenv_deepsea_config.restype = ctypes.c_size_t
        L.dqnenv_deepsea_optimal_return.argtypes = [ctypes.c_int]
        L.dqnenv_deepsea_optimal_return.restype = ctypes.c_float
        L.dqnenv_bitflip_size.restype = ctypes.c_size_t
        L.dqnenv_bitflip_init.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64]
        L.dqnenv_bitflip_reset.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_void_p]
        L.dqnenv_bitflip_step.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.POINTER(ctypes.c_float),
                                          ctypes.c_void_p]
        L.dqnenv_bitflip_config.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
        L.dqnenv_bitflip_config.restype = ctypes.c_size_t
    return _lib


def _config_fields(text):
    """canonical "name=value" lines (learner_config_to_text) -> {name: value}"""
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


class MeanRev:
    """meanrev (client/meanrev_env.h): a trading toy with factored 9 x 3 x 3
    actions and a closed-form optimal policy. Observation float32 [4];
    action a flat index in [0, 81) (first branch most significant) or a
    (exposure, order type, urgency) triple. info["optimal_action"] is the
    closed-form best action for the current state."""

    def __init__(self, seed=0):
        L = _load()
        self._buf = ctypes.create_string_buffer(L.dqnenv_meanrev_size())
        sd, na, hz = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        br = (ctypes.c_int32 * 3)()
        L.dqnenv_meanrev_spec(ctypes.byref(sd), ctypes.byref(na), ctypes.byref(hz), br)
        self.state_dim, self.n_actions, self.horizon = sd.value, na.value, hz.value
        self.branches = list(br)
        self.seed = int(seed)
        self.episode = 0
        self._obs = np.zeros(self.state_dim, dtype=np.float32)

    @staticmethod
    def learner_config():
        """The learner config the demo trains with, {field: text}."""
        buf = ctypes.create_string_buffer(8192)
        n = _load().dqnenv_meanrev_config(buf, len(buf))
        return _config_fields(buf.raw[:min(n, len(buf) - 1)].decode())

    def _info(self):
        return {"optimal_action": int(_load().dqnenv_meanrev_optimal_action(self._buf))}

    def reset(self, seed=None, episode=None):
        """A new episode: episode ids count up from 0 unless given; the seed
        stays unless given. Same (seed, episode), same episode."""
        if seed is not None:
            self.seed = int(seed)
        if episode is not None:
            self.episode = int(episode)
        _load().dqnenv_meanrev_reset(self._buf, self.seed, self.episode, self._obs.ctypes.data)
        self.episode += 1
        return self._obs.copy(), self._info()

    def encode(self, action):
        if isinstance(action, (tuple, list, np.ndarray)) and np.ndim(action) == 1:
            if len(action) != len(self.branches):
                raise ValueError(f"action {tuple(action)}: {len(action)} indices, expected {len(self.branches)}")
            flat = 0
            for a, n in zip(action, self.branches):
                if not 0 <= int(a) < n:
                    raise ValueError(f"action {tuple(action)}: {a} is outside [0, {n})")
                flat = flat * n + int(a)
            return flat
        a = int(action)
        if not 0 <= a < self.n_actions:
            raise ValueError(f"action {a} is outside [0, {self.n_actions})")
        return a

    def step(self, action):
        r = ctypes.c_float()
        done = _load().dqnenv_meanrev_step(self._buf, self.encode(action), ctypes.byref(r), self._obs.ctypes.data)
        if done < 0:
            raise ValueError(f"action {action} is outside [0, {self.n_actions})")
        return self._obs.copy(), float(r.value), False, bool(done), self._info()

    def reward(self, action):
        """The reward `action` would get now (the environment does not move)."""
        return float(_load().dqnenv_meanrev_reward(self._buf, self.encode(action)))


class DeepSea:
    """deep sea (client/deepsea_env.h, bsuite's): an N x N grid, one row down
    every step, left or right as chosen (which action is "right" varies per
    cell, from the seed); +1 for ending in the bottom-right corner, -0.01/N per
    move right; N steps an episode. Observation: the grid one-hot, float32
    [N*N]; actions 0 or 1 (one branch of 2). info["right_action"] is the
    action that moves right from the current cell."""

    def __init__(self, size=10, seed=0):
        L = _load()
        self._buf = ctypes.create_string_buffer(L.dqnenv_deepsea_size())
        if L.dqnenv_deepsea_init(self._buf, int(size), int(seed)):
            raise ValueError(f"size {size} is outside [2, 64]")
        self.size, self.seed = int(size), int(seed)
        self.state_dim, self.n_actions, self.horizon, self.branches = self.size ** 2, 2, self.size, [2]
        self.optimal_return = float(L.dqnenv_deepsea_optimal_return(self.size))
        self._obs = np.zeros(self.state_dim, dtype=np.float32)

    def _info(self):
        return {"right_action": int(_load().dqnenv_deepsea_right_action(self._buf))}

    def reset(self, seed=None):
        if seed is not None and int(seed) != self.seed:
            self.__init__(self.size, seed)
        _load().dqnenv_deepsea_reset(self._buf, self._obs.ctypes.data)
        return self._obs.copy(), self._info()

    def step(self, action):
        r = ctypes.c_float()
        done = _load().dqnenv_deepsea_step(self._buf, int(action), ctypes.byref(r), self._obs.ctypes.data)
        if done < 0:
            raise ValueError(f"action {action} is not 0 or 1")
        return self._obs.copy(), float(r.value), False, bool(done), self._info()

    @staticmethod
    def learner_config(size=10):
        """The learner config deep sea of this size trains with (state N*N,
        one branch of 2): the C environment's (deepsea_learner_config, the
        ensemble of K = 10 thompson heads with priors and masks that the
        learning test holds to its bar), {field: text}."""
        buf = ctypes.create_string_buffer(8192)
        n = _load().dqnenv_deepsea_config(int(size), buf, len(buf))
        return _config_fields(buf.raw[:min(n, len(buf) - 1)].decode())


class BitFlip:
    """bit flipping (client/bitflip_env.h, the HER paper's): n bits, a random
    start and goal; action i flips bit i; reward -1 on every step that does
    not end at the goal, 0 on the one that does (terminated); truncated after
    n steps. Observation float32 [2n]: the bits (the achieved goal) then the
    goal, so HER relabels the whole state (her_goal_dim = n). Episode e's
    start and goal come from the seed and e (reset(episode=e)), so a run is
    repeatable. info["success"] on the last step."""

    def __init__(self, n=10, seed=0):
        L = _load()
        self._buf = ctypes.create_string_buffer(L.dqnenv_bitflip_size())
        if L.dqnenv_bitflip_init(self._buf, int(n), int(seed)):
            raise ValueError(f"n {n} is outside [2, 64]")
        self.n, self.seed, self.episode = int(n), int(seed), -1
        self.state_dim, self.n_actions, self.horizon, self.branches = 2 * self.n, self.n, self.n, [self.n]
        self.goal_dim = self.n
        self._obs = np.zeros(self.state_dim, dtype=np.float32)

    def reset(self, seed=None, episode=None):
        if seed is not None and int(seed) != self.seed:
            self.__init__(self.n, seed)
        self.episode = self.episode + 1 if episode is None else int(episode)
        _load().dqnenv_bitflip_reset(self._buf, self.episode, self._obs.ctypes.data)
        return self._obs.copy(), {}

    def step(self, action):
        r = ctypes.c_float()
        rc = _load().dqnenv_bitflip_step(self._buf, int(action), ctypes.byref(r), self._obs.ctypes.data)
        if rc < 0:
            raise ValueError(f"action {action} is outside [0, {self.n})")
        return self._obs.copy(), float(r.value), rc == 1, rc == 2, {"success": rc == 1}

    @staticmethod
    def learner_config(n=10):
        """The learner config bit flipping with n bits trains with (state 2n,
        one branch of n, HER on the whole state: bitflip_learner_config, the
        one the learning test holds to its bar), {field: text}."""
        buf = ctypes.create_string_buffer(8192)
        k = _load().dqnenv_bitflip_config(int(n), buf, len(buf))
        return _config_fields(buf.raw[:min(k, len(buf) - 1)].decode())


ENVS = {"meanrev": MeanRev, "deepsea": DeepSea, "bitflip": BitFlip}


def make(name, **kw):
    """make("meanrev", seed=1): a built-in environment by name."""
    if name not in ENVS:
        raise KeyError(f"no built-in environment '{name}' (have: {', '.join(ENVS)})")
    return ENVS[name](**kw)
