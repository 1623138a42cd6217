"""dqnd — the Python client of the dqnd training daemon.

    import dqnd
    with dqnd.Client("ipc:///run/dqnd/dqnd.sock") as c:
        c.create_trainer("t1", {"state_dim": 4, "branches": "9,3,3"})
        c.submit("t1", states, actions, rewards, next_states, dones)
        print(c.step("t1", 100)["loss_mean"])

Every command of proto/dqnd/v1/dqnd.proto is a method of Client; errors are
DqndError (code, name, message). A Step stopped early (the request's
deadline inside the client's timeout, a Cancel, the daemon's shutdown) says
so: step()["stopped"], ["stop_reason"]; Client.cancel(name, request_id)
stops one (request_id: the stepping Client's pending_request_id), and Ctrl-C
during step() cancels that Step on the daemon before KeyboardInterrupt
propagates. Built-in environments: dqnd.envs.make().
The protobuf module dqnd.v1.dqnd_pb2 is generated from the .proto at build.
"""
from .client import CODES, Client, DqndError, default_url  # noqa: F401
from . import envs  # noqa: F401

__all__ = ["Client", "DqndError", "CODES", "default_url", "envs"]
