import pytest
import torch

pytest_plugins = ["clbench.testing"]


@pytest.fixture(autouse=True)
def _no_listing_cache(monkeypatch):
    """`clbench list` run in-process by a test builds the registries it may have patched, never a listing another
    test (or the user's own clbench) cached; tests/test_cli.py tests the cache in fresh interpreters."""
    from clbench._core import listing

    monkeypatch.setattr(listing, "load", lambda disabled: None)
    monkeypatch.setattr(listing, "save", lambda found, disabled: None)


@pytest.fixture
def one_thread():
    """Tiny networks: one thread is as fast, and far faster than two on a loaded 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def local_ray():
    """A local Ray with 2 CPUs whose workers run at the tests' priority. Ray starts its workers at niceness 15
    (``RAY_worker_niceness``): beside the other test worker on 2 cores a cell's task then got ~4 % of a core, and
    one EWC cell on two ranks took 441 s instead of 36 s."""
    ray = pytest.importorskip("ray")  # here, not at import: collecting the suite never imports Ray
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_worker_niceness", "0")  # read by the raylet ray.init starts
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    yield ray
    ray.shutdown()
