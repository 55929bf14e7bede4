"""A memory-mapped checkpoint truncated under a loaded tensor: reading the tensor raises a clear OSError (never
SIGBUS), tensors whose bytes are still in the file read fine, and the process keeps working."""
import os

import numpy as np
import pytest

from tinygrad import Tensor
from tinygrad.nn.state import safe_load, safe_save


@pytest.mark.parametrize("read", ["numpy", "to_clang", "tolist"])
def test_truncated_file_raises_instead_of_sigbus(tmp_path, read):
    path = str(tmp_path / "ck.safetensors")
    big = np.arange(1 << 18, dtype=np.float32)
    safe_save({"a": Tensor(np.ones(4, np.float32)), "b": Tensor(big)}, path)
    loaded = safe_load(path)
    os.truncate(path, os.path.getsize(path) - 4096)
    with pytest.raises(OSError, match="truncated to .* load it again"):
        if read == "numpy":
            loaded["b"].numpy()
        elif read == "to_clang":
            loaded["b"].to("CLANG").realize()
        else:
            loaded["b"].tolist()
    np.testing.assert_array_equal(loaded["a"].numpy(), np.ones(4, np.float32))
    assert (Tensor([1.0, 2.0]) * 2).tolist() == [2.0, 4.0]
