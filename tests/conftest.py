import pytest
import torch

pytest_plugins = ["clbench.testing"]


@pytest.fixture
def one_thread():
    """Tiny networks: one thread is as fast, and far faster than two on a loaded 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
