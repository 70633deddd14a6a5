import pytest
import torch

pytest_plugins = ["clbench.testing"]

# Slow tests of modules other work is changing, marked here rather than by a decorator in the module (where a
# mark belongs; move it there when the module is free). A name without [parameters] marks every parameter set.
# `python -m pytest` deselects slow tests (pyproject.toml's addopts); `-m "slow or not slow"` runs them too.
SLOW = frozenset({
    "tests/test_ddp.py::test_two_ranks_give_the_numbers_of_one_process_at_the_same_global_batch",
    "tests/test_ddp.py::test_the_two_rank_runs_differ_from_one_process_where_they_should",
    "tests/test_ddp.py::test_rank_zero_alone_writes_results_checkpoints_and_logs",
    "tests/test_ddp.py::test_a_killed_data_parallel_cell_resumes_to_the_same_numbers",
    "tests/test_ddp.py::test_torchrun_processes_are_the_ranks",
    "tests/test_executors.py::test_fail_fast_stops_the_workers",
    "tests/test_lps_method.py::test_beta_sweep_renders_its_own_rows_and_an_aa_against_beta_plot",
    "tests/test_memory.py::test_dry_run_prints_every_cell_and_device_memory_refuses_before_anything_runs",
    "tests/test_memory.py::test_the_paper_cells_fit_one_80_gib_gpu",
    "tests/test_memory.py::test_paper_expanders_8b_full_fine_tuning_needs_a_141_gib_gpu",
    "tests/test_memory.py::test_a_transformers_cell_is_estimated_on_the_meta_device_and_agrees_with_real_tensors",
    "tests/test_memory.py::test_the_terms_of_an_ewc_cell_are_the_sizes_its_algorithm_needs",
    "tests/test_memory.py::test_whole_selections_of_bf16_weights_also_over_count_the_masters_outside_the_masks_union",
    "tests/test_memory.py::test_the_meta_estimate_is_the_measurement_on_real_tensors[ewc]",
    "tests/test_plugin_guide.py::test_the_guide_builds_installs_and_runs",
    "tests/test_registry.py::test_third_party_distribution_is_listed_and_runs",
    "tests/test_registry.py::test_plugin_failing_at_import_names_its_distribution",
})


@pytest.hookimpl(tryfirst=True)  # before -m deselects
def pytest_collection_modifyitems(items):
    for item in items:
        if item.nodeid in SLOW or item.nodeid.partition("[")[0] in SLOW:
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def one_thread():
    """Tiny networks: one thread is as fast, and far faster than two on a loaded 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
