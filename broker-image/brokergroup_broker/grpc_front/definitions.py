"""The apache.rocketmq.v2 messages and service, as the official Python SDK
(`rocketmq-python-client`, PyPI) ships them generated from apache/rocketmq-apis: not copied
by hand, pinned with the SDK in pyproject.toml.

The SDK's top-level package `rocketmq` imports the whole client and configures file logging
under ~/logs when it is imported; a broker needs only the generated modules. So the package
`rocketmq.grpc_protocol` is loaded from the SDK's files under its own name without running
`rocketmq/__init__.py` (its generated modules import one another as
`rocketmq.grpc_protocol.*`, which then resolves to this one copy). A process that imports
the SDK as well (a test) finds the same module in `sys.modules` and uses it.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType
from typing import Any

_PACKAGE = "rocketmq.grpc_protocol"


def _load_generated() -> ModuleType:
    loaded = sys.modules.get(_PACKAGE)
    if loaded is not None:
        return loaded
    top = importlib.util.find_spec("rocketmq")  # finds, does not run, rocketmq/__init__.py
    if top is None or not top.submodule_search_locations:
        raise ImportError(
            "the gRPC front end needs the apache.rocketmq.v2 definitions of the official "
            "Python SDK: pip install 'brokergroup[broker]' (rocketmq-python-client)"
        )
    for location in top.submodule_search_locations:
        init = f"{location}/grpc_protocol/__init__.py"
        spec = importlib.util.spec_from_file_location(
            _PACKAGE, init, submodule_search_locations=[f"{location}/grpc_protocol"]
        )
        if spec is None or spec.loader is None:
            continue
        module = importlib.util.module_from_spec(spec)
        sys.modules[_PACKAGE] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(_PACKAGE, None)
            raise
        return module
    raise ImportError(f"no {_PACKAGE} in {list(top.submodule_search_locations)}")


_generated = _load_generated()

#: definition.proto and service.proto's generated modules.
pb: Any = sys.modules[f"{_PACKAGE}.definition_pb2"]
service_pb: Any = sys.modules[f"{_PACKAGE}.service_pb2"]
service_grpc: Any = sys.modules[f"{_PACKAGE}.service_pb2_grpc"]

#: The service's full name (the method paths are /<this>/<Method>).
SERVICE_NAME = "apache.rocketmq.v2.MessagingService"

Code: Any = pb.Code
