"""oclml: liboclml's fused machine-learning ops on any OpenCL device, from Python.

    import numpy as np, oclml
    with oclml.Context() as ctx:
        x = ctx.tensor(np.random.rand(4, 10))
        print(oclml.softmax(x).numpy())

Contexts and tensors are Python objects over the C library's (through cffi, no compiled
extension); ops are functions with PyTorch's names and defaults; errors raise oclml.Error
subclasses with the status name and the library's last-error text."""

from .context import Context, device_match, ops_list, tuning_key_for_developers, version
from .errors import *  # noqa: F401,F403
from .errors import Error
from .fused import *  # noqa: F401,F403
from .ops import *  # noqa: F401,F403
from .recurrent import *  # noqa: F401,F403
from .optim import Arena, Optimizer
from .tensor import DTYPES, Tensor

__version__ = version()
__all__ = ["Context", "Tensor", "Arena", "Optimizer", "Error", "DTYPES", "version", "ops_list",
           "device_match", "tuning_key_for_developers"]
