"""The autograder: solutions get full marks, stubs score 0, broken and cheating submissions fail.

Grading runs learner code in child processes (a fresh interpreter per exercise), so these tests
are slow-ish: the solutions of all 11 exercises, the stubs, and one broken module per failure mode
(tests/broken_submissions/: honest mistakes and deliberate cheats, each with the check it fails).
Every grading call passes a seed: no test depends on an unseeded draw.
"""
import ast
import hashlib
import html
import json
import os
import re
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from flashlab.grading import EXERCISES, check, checks, confine
from flashlab.grading.checks import choice_letter, compare
from flashlab.grading.cli import main
from flashlab.grading.registry import Part
from flashlab.grading.report import Report
from flashlab.grading.sandbox import has_gpu_driver
from flashlab.tiled import tiled_attention as _library_tiled

REPO = Path(__file__).resolve().parents[1]
BROKEN = Path(__file__).resolve().parent / "broken_submissions"


def _tree_digest(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_solutions_score_full_marks_through_cli_main(capsys):
    rc = main(["--solutions", "--json", "--seed", "1"])
    report = json.loads(capsys.readouterr().out)
    failed = [(p["exercise"], p["function"], p["failure"]) for e in report["exercises"] for p in e["parts"]
              if p["status"] != "passed"]
    assert failed == [], f"solutions failed: {failed}"
    assert rc == 0 and report["passed"] and report["score"] == report["total"] > 0
    assert {e["name"] for e in report["exercises"]} == set(EXERCISES)
    for e in report["exercises"]:
        for p in e["parts"]:  # every public and hidden check ran and passed: counts are honest
            assert p["public"][0] == p["public"][1] >= 1 and p["hidden"][0] == p["hidden"][1], p


def test_flashlab_grade_command_runs_in_a_fresh_process():
    # The wiring of `flashlab grade` (flashlab.cli -> grading.cli.main) on two NumPy exercises: the
    # full set of solutions goes through the same main() in the test above, so grading all eleven
    # again here (about 30 s on 2 cores, mostly the Triton interpreter) would prove nothing more.
    names = ["ex01_naive", "ex04_causal_tiles"]
    out = subprocess.run([sys.executable, "-m", "flashlab.cli", "grade", *names, "--solutions", "--seed", "1"],
                         capture_output=True, text=True, cwd=REPO, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    total = sum(EXERCISES[name].points for name in names)
    assert f"{total}/{total}" in out.stdout.splitlines()[-1], out.stdout
    out = subprocess.run([sys.executable, "-m", "flashlab.cli", "grade", *names, "--json", "--seed", "1",
                          "--exercises-dir", str(REPO / "exercises")],  # the stubs, not a learner's work/
                         capture_output=True, text=True, cwd=REPO, timeout=600)
    report = json.loads(out.stdout)  # nothing but the JSON on stdout
    assert out.returncode == 1 and report["score"] == 0 and [e["name"] for e in report["exercises"]] == names


def test_untouched_exercises_score_zero_exit_nonzero_and_stay_unmodified(capsys):
    before = _tree_digest(REPO / "exercises")
    rc = main(["--exercises-dir", str(REPO / "exercises"), "--json", "--seed", "1"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 1 and report["score"] == 0 and not report["passed"]
    statuses = {(p["exercise"], p["function"]): p["status"] for e in report["exercises"] for p in e["parts"]}
    assert set(statuses.values()) == {"not attempted"}, statuses
    assert len(statuses) == sum(len(e.parts) for e in EXERCISES.values())
    assert _tree_digest(REPO / "exercises") == before, "grading changed files under exercises/"


# (broken module, graded as, part, failure kind, words the message must contain). The first block
# predates the grader's redesign (17 modules); the second is one module per way the old grader was
# beaten, by cause: the verdict reachable from the learner's process (1), results compared with
# their own == (2), memory measured inside the process (3), launches counted rather than proven
# (4), forbidden calls as a name list (5), poisoned inputs sanitised (6), no resource limits or
# cleanup (7), honest mistakes no case caught (8).
BROKEN_CASES = [
    ("raises_exception", "ex01_naive", "naive_attention", "exception", "raised IndexError"),
    ("wrong_shape", "ex01_naive", "naive_attention", "shape", "expected (8, 4)"),
    ("wrong_dtype", "ex01_naive", "naive_attention", "dtype", "dtype float64, expected float32"),
    ("nan_output", "ex02_softmax", "safe_softmax", "nan", "NaN at index"),
    ("mutates_input", "ex02_softmax", "safe_softmax", "mutation", "changed its input(s) x in place"),
    ("wrong_values", "ex02_softmax", "online_softmax", "value", "max abs error"),
    ("never_returns", "ex01_naive", "naive_attention", "timeout", "did not return within"),
    ("crashes_process", "ex01_naive", "naive_attention", "crash", "grading process died (exit code 3)"),
    ("import_error", "ex01_naive", "naive_attention", "load", "importing the module failed: ImportError"),
    ("materialises_scores", "ex03_tiled_forward", "tiled_attention", "memory", "never build an Nq x Nk array"),
    ("calls_library", "ex03_tiled_forward", "tiled_attention", "forbidden", "called flashlab.tiled.tiled_attention"),
    ("calls_torch_sdpa", "ex01_naive", "naive_attention", "forbidden", "scaled_dot_product"),
    # torch's modes are per thread: threads of the learner's own enter the grader's watch (child.ThreadWatch)
    ("calls_torch_sdpa_in_a_thread", "ex01_naive", "naive_attention", "forbidden", "scaled_dot_product"),
    ("calls_torch_sdpa_after_a_thread_imports_torch", "ex01_naive", "naive_attention", "forbidden",
     "scaled_dot_product"),
    ("calls_torch_sdpa_in_a_pool_started_at_import", "ex01_naive", "naive_attention", "forbidden",
     "torch in a thread started before torch was imported"),
    ("autograd_row_block_in_a_thread", "ex15_autograd_flash", "flash_forward_lse", "memory",
     "the largest then: (1, 8, 8192) float64"),
    ("no_causal_skip", "ex03_tiled_forward", "tiled_attention", "nan", "NaN at index"),
    ("kernel_not_launched", "ex06_triton_primer", "vector_add", "launch", "never launched the Triton kernel add_kernel"),
    ("kernel_no_causal_skip", "ex08_kernel_causal", "flash_forward", "nan", "NaN at index"),
    ("calls_library_kernel", "ex08_kernel_causal", "flash_forward", "forbidden",
     "called flashlab.kernels.flash_fwd.forward_v1"),
    ("kernel_replaced_by_torch", "ex07_kernel_inner_loop", "flash_forward", "launch",
     "no Triton kernel flash_fwd_kernel next to flash_forward"),
    # 1. the verdict, the reference and the grader's state live only in the parent
    ("sends_own_verdict", "ex01_naive", "naive_attention", "protocol", "sent something unexpected"),
    ("reads_expected_from_frames", "ex01_naive", "naive_attention", "value", "max abs error"),
    # 2. plain data compared in the parent: a subclass's == is never called
    ("eq_subclass", "ex01_naive", "naive_attention", "value", "max abs error"),
    ("eq_subclass", "ex01_naive", "naive_hbm_bytes", "value", "returned 0, expected"),
    # 3. peak resident memory read from /proc, whatever allocates it
    ("materialises_in_torch", "ex03_tiled_forward", "tiled_attention", "memory", "never build an Nq x Nk array"),
    ("materialises_in_mmap", "ex03_tiled_forward", "tiled_attention", "memory", "never build an Nq x Nk array"),
    ("rows_full_softmax", "ex03_tiled_forward", "tiled_attention", "memory", "nor a block_q x Nk one"),
    # one query row against every key: 256 KiB in the 65536-key case, 8 MiB in the long-row case
    ("query_rows_one_at_a_time", "ex03_tiled_forward", "tiled_attention", "memory",
     "one row of Nk = 1048576 scores (one query row against every key) is 8.0 MiB"),
    ("query_rows_one_at_a_time_backward", "ex10_tiled_backward", "tiled_attention_backward", "memory",
     "one row of Nk = 1048576 scores (one query row against every key) is 8.0 MiB"),
    # torch tensors held at once, counted exactly in the child (the resident size flaked on these)
    ("autograd_row_block_against_every_key", "ex15_autograd_flash", "flash_forward_lse", "memory",
     "the largest then: (1, 8, 8192) float64"),
    ("autograd_row_block_against_every_key", "ex15_autograd_flash", "forward_and_backward", "memory",
     "the largest then: (1, 8, 8192) float64"),
    ("autograd_backward_keeps_full_p", "ex15_autograd_flash", "forward_and_backward", "memory",
     "the largest then: (1, 256, 8192) float64"),
    # the same row blocks inside an operator of the learner's own (torch.library): its body ran unwatched
    ("autograd_row_block_in_custom_op", "ex15_autograd_flash", "flash_forward_lse", "forbidden",
     "torch operator hg_test.row_block_fwd"),
    ("autograd_row_block_in_custom_op", "ex15_autograd_flash", "forward_and_backward", "forbidden",
     "torch operator hg_test.row_block_fwd"),
    # ... or inside a tensor subclass's __torch_dispatch__ (the mode steps aside there too)
    ("autograd_row_block_in_tensor_subclass", "ex15_autograd_flash", "flash_forward_lse", "forbidden",
     "tensor type graded_ex15_autograd_flash._Carrier"),
    ("autograd_row_block_in_tensor_subclass", "ex15_autograd_flash", "forward_and_backward", "forbidden",
     "tensor type graded_ex15_autograd_flash._Carrier"),
    # tiles over the docstring's 128 x 256: named as tiles, not as a block of rows against every key
    ("autograd_tiles_too_large", "ex15_autograd_flash", "flash_forward_lse", "memory",
     "tiles of 256 x 256 float64 held 2.03 MiB"),
    ("autograd_tiles_too_large", "ex15_autograd_flash", "forward_and_backward", "memory",
     "use tiles of at most 128 x 256"),
    # the work handed to NumPy, where no count of torch tensors sees it: refused as a bridge out of torch
    ("autograd_naive_in_numpy_pool", "ex15_autograd_flash", "flash_forward_lse", "forbidden",
     "Tensor.numpy (exercise 15 computes with torch tensors"),
    ("autograd_naive_in_numpy_pool", "ex15_autograd_flash", "forward_and_backward", "forbidden",
     "Tensor.numpy (exercise 15 computes with torch tensors"),
    ("autograd_row_block_in_numpy", "ex15_autograd_flash", "forward_and_backward", "forbidden",
     "Tensor.__array__ (exercise 15 computes with torch tensors"),
    # ... without a bridge method: values copied one .item() at a time, or memory read through ctypes
    ("autograd_row_block_via_item", "ex15_autograd_flash", "forward_and_backward", "forbidden",
     "reading more than 24576 numbers (.item(), float(t), int(t)) into Python one at a time"),
    ("autograd_row_block_via_ctypes", "ex15_autograd_flash", "forward_and_backward", "load",
     "reading memory through ctypes (ctypes.cdata)"),
    # ... or through a memoryview made with ctypes at import, where no call is watched: refused at load
    ("autograd_copies_memory_by_memmove", "ex15_autograd_flash", "flash_forward_lse", "load",
     "reading memory through ctypes (ctypes.memmove)"),
    ("autograd_copies_by_a_rebuilt_memmove", "ex15_autograd_flash", "flash_forward_lse", "load",
     "reading memory through ctypes (ctypes._memmove_addr)"),
    ("autograd_copies_by_an_unlisted_copy_function", "ex15_autograd_flash", "flash_forward_lse", "load",
     "calling the C function '__memcpy_chk' through ctypes"),
    ("autograd_reads_memory_through_curl_escape", "ex15_autograd_flash", "flash_forward_lse", "load",
     "calling the C function 'curl_easy_escape' through ctypes"),
    ("autograd_reads_memory_through_pyobj_fromptr", "ex15_autograd_flash", "flash_forward_lse", "load",
     "reading memory through ctypes (ctypes.PyObj_FromPtr)"),
    ("autograd_reads_memory_through_torch_xpu_cast", "ex15_autograd_flash", "flash_forward_lse", "load",
     "reading memory through ctypes (ctypes.cast)"),
    ("autograd_reads_memory_through_a_memoryview", "ex15_autograd_flash", "flash_forward_lse", "load",
     "reading memory through ctypes (ctypes.cdata)"),
    # 4. a result must be written by a launch of the learner's own kernel
    ("kernel_noop_torch_computes", "ex06_triton_primer", "vector_add", "launch", "ran torch's aten.add at line"),
    # the kernel wrote nothing: the output it was handed is a derived input, no output of the launch (on a
    # GPU a fresh buffer may hold zeros, an accumulator's start, so NumPy's write changes what it left)
    ("kernel_noop_numpy_writes", "ex06_triton_primer", "vector_add", "launch",
     ("not written by a launch of your kernel", "changed after your kernel wrote it")),
    ("kernel_copies_precomputed", "ex06_triton_primer", "vector_add", "launch", "handed the answer"),
    ("launches_library_kernel", "ex06_triton_primer", "vector_add", "forbidden", "(a flashlab kernel)"),
    ("kernel_of_another_module_stores_past_the_end", "ex06_triton_primer", "vector_add", "exception",
     "past the end of Out"),
    # 5. library functions patched in place, torch watched at the aten level
    ("aten_softmax", "ex06_triton_primer", "row_softmax", "forbidden", "_softmax"),
    ("kernel_torch_softmax", "ex07_kernel_inner_loop", "flash_forward", "forbidden", "called torch aten."),
    ("reloads_library", "ex03_tiled_forward", "tiled_attention", "forbidden", "called flashlab.tiled.tiled_attention"),
    ("library_in_fork", "ex03_tiled_forward", "tiled_attention", "exception", "may not start processes"),
    ("library_wrapped", "ex01_naive", "naive_attention", "forbidden", "called flashlab.reference.naive_attention"),
    # 6. poisoned inputs: byte digests for mutation, CPU time for work on keys no query sees
    ("sanitises_poison", "ex03_tiled_forward", "tiled_attention", "work", "a causal loop skips"),
    ("zeroes_poison_in_place", "ex03_tiled_forward", "tiled_attention", "mutation", "changed its input(s) k, v"),
    # 7. resource limits (see also the tests below for processes left behind and the grader's files)
    ("memory_hog", "ex01_naive", "naive_attention", "memory_limit", "used more than 0.5 GiB of memory"),
    # 8. honest mistakes that passed every seed
    ("ignores_scale", "ex03_tiled_forward", "tiled_attention", "value", "max abs error"),
    ("tiled_zero_when_blocks_exceed_sequence", "ex03_tiled_forward", "tiled_attention", "value", "max abs error"),
    ("kernel_loop_bound_no_nq", "ex08_kernel_causal", "flash_forward", "nan", "NaN at index"),
    # honest mistakes named by grading.mistakes (each was 'max abs error' or 'NaN at index' alone)
    ("softmax_max_over_rows", "ex02_softmax", "safe_softmax", "value", "looks like the max is taken over the wrong axis"),
    ("softmax_max_over_rows", "ex02_softmax", "online_softmax", "nan",
     "looks like the chunk's max is not taken along each row"),
    ("bwd_p_tile_softmax", "ex10_tiled_backward", "tiled_attention_backward", "value",
     "looks like P is recomputed as each key tile's own softmax"),
    ("bwd_dk_untransposed", "ex10_tiled_backward", "tiled_attention_backward", "value",
     "looks like dK_j is accumulated as dS Q_i, without the transpose"),
    ("bwd_d_without_o", "ex10_tiled_backward", "tiled_attention_backward", "value",
     "looks like D is rowsum(dO) without the factor O"),
    # 9. what the kernel enforces in the child (flashlab.grading.confine) and the parent's reading of claims
    ("forks_to_hide_memory", "ex03_tiled_forward", "tiled_attention", "exception", "may not start processes"),
    ("resets_peak_memory", "ex03_tiled_forward", "tiled_attention", "memory", "never build an Nq x Nk array"),
    ("forges_record", "ex01_naive", "naive_attention", "protocol", "field 'forbidden_calls' is a int"),
    ("claims_gpu", "ex01_naive", "naive_attention", "protocol", "claims a CUDA device"),
    ("computes_before_ready", "ex03_tiled_forward", "tiled_attention", "memory", "never build an Nq x Nk array"),
    ("prefaulted_pool", "ex03_tiled_forward", "tiled_attention", "memory", "not even in a buffer allocated"),
    ("stores_scores_in_memfd", "ex03_tiled_forward", "tiled_attention", "memory", "to files, pipes or memfds"),
    ("tampers_import_guard", "ex03_tiled_forward", "tiled_attention", "forbidden",
     "called flashlab.tiled.tiled_attention"),
    ("reads_solutions_from_disk", "ex03_tiled_forward", "tiled_attention", "load", "Permission denied"),
    ("reads_grader_environment", "ex01_naive", "naive_attention", "exception", "leaked: {}"),
    ("loads_library_copy", "ex03_tiled_forward", "tiled_attention", "load", "Permission denied"),
    ("returns_huge_array", "ex01_naive", "naive_attention", "protocol", "bytes (header"),
    ("quiz_huge_number", "ex11_quiz", "Q5", "type", "expected a number"),
    ("sends_deep_header", "ex01_naive", "naive_attention", "protocol", "nested too deeply"),
    ("sends_result_from_thread", "ex01_naive", "naive_attention", "protocol", "digests, output missing"),
    ("asks_remote_oracle", "ex01_naive", "naive_attention", "exception", "open network connections"),
    ("fills_disk", "ex01_naive", "naive_attention", "memory_limit", "wrote more than 16 MiB of files"),
    ("kernel_answer_as_int_bits", "ex14_split_kv_decode", "split_kv_partials", "launch", "handed the answer"),
    ("kernel_refilled_accumulator", "ex13_triton_backward", "flash_backward_dkdv", "launch", "handed the answer"),
    ("kernel_handed_p_and_ds_from_numpy", "ex13_triton_backward", "flash_backward_dkdv", "launch",
     "more than twice the size of the largest input"),
    ("kernel_handed_p_and_ds_from_numpy", "ex13_triton_backward", "flash_backward_dq", "launch",
     "more than twice the size of the largest input"),
    # ... or cut into chunks each under that size: the derived inputs are counted together
    ("kernel_handed_p_and_ds_in_chunks", "ex13_triton_backward", "flash_backward_dkdv", "launch",
     "however cut, are the kernel's work"),
    ("kernel_handed_p_and_ds_in_chunks", "ex13_triton_backward", "flash_backward_dq", "launch",
     "however cut, are the kernel's work"),
    # a copy of K and V (astype copies): named as a copy in the long-row case, with the way out
    ("copies_k_and_v_with_astype", "ex03_tiled_forward", "tiled_attention", "memory",
     "at least a copy of K or V"),
    ("autograd_differentiates_naive", "ex15_autograd_flash", "forward_and_backward", "exception",
     "does not go through FlashAttention2"),
    ("autograd_inside_backward", "ex15_autograd_flash", "forward_and_backward", "exception",
     "autograd ran inside FlashAttention2.backward"),
    ("kernel_answer_in_input_storage", "ex12_triton_online_softmax", "online_row_softmax", "launch",
     "an input held other values when your kernel was launched"),
    ("kernel_answer_transposed", "ex12_triton_online_softmax", "online_row_softmax", "launch", "handed the answer"),
    ("kernel_answer_as_scalar_args", "ex14_split_kv_decode", "split_kv_partials", "launch", "handed the answer"),
    # a large buffer that is mostly its fill holds no more than the answer: judged by what it holds
    ("kernel_answer_in_big_buffer", "ex13_triton_backward", "flash_backward_dkdv", "launch", "handed the answer"),
    ("autograd_from_a_decoy_function", "ex15_autograd_flash", "forward_and_backward", "exception",
     "does not go through FlashAttention2"),
    ("autograd_on_a_second_engine", "ex15_autograd_flash", "forward_and_backward", "exception",
     "autograd ran inside FlashAttention2.backward"),
    ("kernel_reads_an_integer_address", "ex07_kernel_inner_loop", "flash_forward", "forbidden",
     "an integer cast to a pointer"),
    ("kernel_answer_in_a_tuple_argument", "ex14_split_kv_decode", "split_kv_partials", "launch", "handed the answer"),
    # tiles as long as the sequence (or the split), which left each kernel's loop one step (Part.max_launch_block)
    ("kernel_tiles_span_the_sequence", "ex13_triton_backward", "flash_backward_dkdv", "launch",
     "built a tile of 256 (a tensor dimension"),
    ("kernel_tiles_span_the_sequence", "ex13_triton_backward", "flash_backward_dq", "launch",
     "built a tile of 256 (a tensor dimension"),
    ("kernel_tile_spans_the_split", "ex14_split_kv_decode", "split_kv_partials", "launch",
     "decode_partial_kernel built a tile of 256"),
    ("kernel_tile_named_as_a_stride", "ex14_split_kv_decode", "split_kv_partials", "launch",
     "decode_partial_kernel built a tile of 256"),
    ("kernel_tile_literal", "ex14_split_kv_decode", "split_kv_partials", "launch",
     "decode_partial_kernel built a tile of 256"),
    ("kernel_tile_global_constexpr", "ex14_split_kv_decode", "split_kv_partials", "launch",
     "decode_partial_kernel built a tile of 256"),
    ("kernel_tile_int_subclass", "ex14_split_kv_decode", "split_kv_partials", "launch",
     "decode_partial_kernel built a tile of 256"),
    ("kernel_tile_doubled_in_the_kernel", "ex14_split_kv_decode", "split_kv_partials", "launch",
     "decode_partial_kernel built a tile of 256"),
    ("kernel_tile_behind_32_distinct_launches", "ex14_split_kv_decode", "split_kv_partials", "launch",
     "decode_partial_kernel built a tile of 256"),
    ("kernel_row_tile_literal", "ex12_triton_online_softmax", "online_row_softmax", "launch",
     "online_softmax_kernel built a tile of 512 beside BLOCK_N"),
    ("kernel_inner_tile_global", "ex13_triton_backward", "flash_backward_dkdv", "launch",
     "flash_bwd_dkdv_kernel built a tile of 256"),
    ("kernel_answer_in_an_expanded_view", "ex14_split_kv_decode", "split_kv_partials", "launch", "handed the answer"),
    # the rerun on real values did not write the buffer holding the answer: a derived input, so no output
    ("kernel_answer_behind_an_out_of_bounds_poison", "ex14_split_kv_decode", "split_kv_partials", "launch",
     "not written by a launch of your kernel"),
    # correct arithmetic whose last step (O = acc / l, lse = m + log l) runs in torch after the last launch
    ("kernel_normalised_in_the_wrapper", "ex07_kernel_inner_loop", "flash_forward", "launch",
     "ran torch's aten.div at line"),
    ("kernel_lse_formed_in_the_wrapper", "ex14_split_kv_decode", "split_kv_partials", "launch",
     "ran torch's aten.log at line"),
    # an argument a launch only reads (an expanded view, a derived input) is no output of it
    ("kernel_answer_under_a_misaligned_expanded_view", "ex07_kernel_inner_loop", "flash_forward", "launch",
     "not written by a launch of your kernel"),
    # the kernel launched again by the grader on inputs of its own (grading.contracts): the answer in disguise,
    # averaged back by a kernel that computes no attention; an output written by a thread while the kernel idles
    ("kernel_averages_an_answer_in_disguise", "ex07_kernel_inner_loop", "flash_forward", "launch",
     "flash_fwd_kernel was never launched at the problem's sizes (N_Q = 32, N_K = 32, HEAD_DIM = 16); its launches "
     "had N_Q = 1, N_K = 2, HEAD_DIM = 16"),
    ("kernel_disguise_then_a_launch_that_passes_alone", "ex07_kernel_inner_loop", "flash_forward", "launch",
     "flash_fwd_kernel was never launched at the problem's sizes (N_Q = 32, N_K = 32, HEAD_DIM = 16)"),
    # a relaunch that kept the learner's scale or strides would expect the mean of V that the kernel computes;
    # decoy launches would hide the real one from a sample of the launches
    ("kernel_mean_of_v_with_a_zero_scale", "ex07_kernel_inner_loop", "flash_forward", "launch",
     ("flash_fwd_kernel, launched again by the grader", "the grader launches flash_fwd_kernel again",
      "flash_fwd_kernel was never launched at the problem's sizes")),
    ("kernel_mean_of_v_with_a_zero_key_stride", "ex07_kernel_inner_loop", "flash_forward", "launch",
     ("flash_fwd_kernel, launched again by the grader", "the grader launches flash_fwd_kernel again",
      "flash_fwd_kernel was never launched at the problem's sizes")),
    ("kernel_causal_prefix_mean_with_a_zero_key_stride", "ex08_kernel_causal", "flash_forward", "launch",
     ("flash_fwd_kernel, launched again by the grader", "flash_fwd_kernel was never launched at the problem's sizes")),
    ("kernel_unnormalised_among_decoy_launches", "ex12_triton_online_softmax", "online_row_softmax", "launch",
     "online_softmax_kernel was never launched at the problem's sizes (n_cols = 100)"),
    ("kernel_averages_split_states_in_disguise", "ex14_split_kv_decode", "split_kv_partials", "launch",
     "decode_partial_kernel was never launched at the problem's sizes (N_K = 64, HEAD_DIM = 16); its launches had "
     "N_K = 8, HEAD_DIM = 16"),
    # ... and the relaunch told by the grader's scale, the empty state written everywhere; a softmax over two keys
    ("kernel_empty_states_when_the_scale_changes", "ex14_split_kv_decode", "split_kv_partials", "launch",
     ("it wrote only empty states (lse = -inf) where the sequences have keys",
      "decode_partial_kernel was never launched at the problem's sizes")),
    ("kernel_answer_through_extra_outputs", "ex14_split_kv_decode", "split_kv_partials", "launch",
     "it wrote only empty states (lse = -inf) where the sequences have keys"),
    ("kernel_keys_per_split_of_one", "ex14_split_kv_decode", "split_kv_partials", "launch",
     "it was given keys_per_split = 1 with N_K = 64 keys in 4 splits"),
    ("kernel_softmax_over_two_keys_of_each_split", "ex14_split_kv_decode", "split_kv_partials", "launch",
     "did not compute the partial state (o_s, lse_s) of its split's keys"),
    # the backward kernels and the primer's softmax kernel, launched again: an answer the wrapper computed
    # elementwise in torch, handed over doubled and halved by the kernel
    ("kernel_backward_answer_in_disguise", "ex13_triton_backward", "flash_backward_dkdv", "launch",
     "flash_bwd_dkdv_kernel, launched again by the grader on inputs of its own (random Q, K, V and dO with "
     "N_Q = 32 query rows and N_K = 32 keys, the LSE and D = rowsum(dO * O) of that attention, sm_scale = 0.3"),
    ("kernel_backward_answer_in_disguise", "ex13_triton_backward", "flash_backward_dq", "launch",
     "did not compute dQ of attention (dQ = sm_scale dS K)"),
    ("kernel_softmax_in_disguise", "ex06_triton_primer", "row_softmax", "launch",
     "softmax_kernel, launched again by the grader on inputs of its own (random X"),
    # ... launched at sizes of their own, for which every expected value of the relaunch is small: zeros are
    # judged by the error's norm; sizes far beyond the problem's are refused before the relaunch
    ("kernel_backward_at_sizes_of_its_own", "ex13_triton_backward", "flash_backward_dkdv", "launch",
     "make tensors of more than 4194304 elements in all, far more than the problem it was given"),
    ("kernel_backward_at_sizes_of_its_own", "ex13_triton_backward", "flash_backward_dq", "launch",
     "flash_bwd_dq_kernel was never launched at the problem's sizes (N_Q = 32, N_K = 32, HEAD_DIM = 16); its "
     "launches had N_Q = 1, N_K = 64, HEAD_DIM = 16384"),
    ("kernel_softmax_over_columns_of_its_own", "ex06_triton_primer", "row_softmax", "launch",
     "softmax_kernel was never launched at the problem's sizes (n_cols = 100); its launches had n_cols = 131072"),
    # the required kernel launched only on decoys of the wrapper's making, where what it must write is trivial,
    # while another kernel (or the same one beyond its declared view) writes an answer made in torch
    ("kernel_decoy_launches_while_another_kernel_writes", "ex13_triton_backward", "flash_backward_dkdv", "launch",
     "flash_bwd_dkdv_kernel was never launched at the problem's sizes (N_Q = 32, N_K = 32, HEAD_DIM = 16)"),
    ("kernel_decoy_launches_while_another_kernel_writes", "ex13_triton_backward", "flash_backward_dq", "launch",
     "flash_bwd_dq_kernel was never launched at the problem's sizes"),
    ("kernel_softmax_declares_one_column", "ex06_triton_primer", "row_softmax", "launch",
     "softmax_kernel was never launched at the problem's sizes (n_cols = 100); its launches had n_cols = 1"),
    ("kernel_online_softmax_on_a_decoy_column", "ex12_triton_online_softmax", "online_row_softmax", "launch",
     "online_softmax_kernel was never launched at the problem's sizes (n_cols = 100)"),
    ("kernel_split_states_on_a_one_key_decoy", "ex14_split_kv_decode", "split_kv_partials", "launch",
     "decode_partial_kernel was never launched at the problem's sizes (N_K = 64, HEAD_DIM = 16); its launches had "
     "N_K = 1, HEAD_DIM = 16"),
    ("kernel_empty_states_at_the_problems_sizes", "ex14_split_kv_decode", "split_kv_partials", "launch",
     "at the problem's N_K = 64 its launches left split 0 (keys 0 to 15) with the empty state"),
    ("kernel_causal_answer_beside_a_non_causal_launch", "ex08_kernel_causal", "flash_forward", "launch",
     "flash_fwd_kernel was never launched at the problem's sizes (N_Q = 32, N_K = 32, HEAD_DIM = 16, CAUSAL = True); "
     "its launches had N_Q = 32, N_K = 32, HEAD_DIM = 16, CAUSAL = False"),
    ("kernel_idle_while_a_thread_writes", "ex06_triton_primer", "vector_add", "launch",
     ("add_kernel, launched again by the grader", "changed after your kernel wrote it",
      "not written by a launch of your kernel")),  # which, depends on when the thread runs (on a GPU: the third)
    ("kernel_finished_in_torch_then_a_dummy_launch", "ex07_kernel_inner_loop", "flash_forward", "launch",
     "not written by a launch of your kernel"),
    # 10. honest mistakes a learner walk found scored, or reported by the case's why rather than by name
    ("combine_without_max", "ex14_split_kv_decode", "combine_splits", "nan",
     "looks like the splits are combined without subtracting the largest lse first"),
    ("count_tiles_unclipped_last_row", "ex04_causal_tiles", "count_computed_tiles", "value",
     "looks like the skip rule takes a query block's last row as (i + 1) * block_q - 1, not clipped to nq"),
    ("count_tiles_skip_one_off", "ex04_causal_tiles", "count_computed_tiles", "value",
     "looks like the skip rule is one off (>= for >)"),
    ("quiz_typical_wrong_answers", "ex11_quiz", "Q5", "value", "looks like K and V were counted as read once"),
    ("kernel_padded_keys_in_the_softmax", "ex07_kernel_inner_loop", "flash_forward", "value",
     "looks like the keys past N_K in the last, partial key block count in the softmax"),
    ("bwd_causal_p_unmasked", "ex10_tiled_backward", "tiled_attention_backward", "value",
     "looks like the recomputed P is not causally masked"),
    ("kernel_body_writes_with_torch", "ex06_triton_primer", "vector_add", "forbidden",
     ("changed where no tl.store of the launch reached", "launched again by the grader")),
    ("kernel_body_reads_and_writes_through_ctypes", "ex07_kernel_inner_loop", "flash_forward", "forbidden",
     ("reading memory through ctypes", "launched again by the grader")),
    ("kernel_relaunch_inputs_zeroed_by_a_patched_randn", "ex07_kernel_inner_loop", "flash_forward", "launch",
     "they were not what it drew"),
    ("kernel_key_block_count_of_its_own", "ex07_kernel_inner_loop", "flash_forward", "launch",
     "Your kernel also takes NUM_KB, which the grader passes as your launch had it"),
    ("kernel_k_not_transposed", "ex07_kernel_inner_loop", "flash_forward", "value",
     "looks like the scores are Q K_j, not Q K_j^T"),
    ("scores_in_a_shared_mapping_dropped_page_by_page", "ex03_tiled_forward", "tiled_attention", "exception",
     "map memory shared with a file or another process"),
    ("scores_in_a_shared_mapping_through_ctypes", "ex03_tiled_forward", "tiled_attention", "exception",
     "map memory shared with a file or another process"),
    ("scores_spliced_into_a_memfd", "ex03_tiled_forward", "tiled_attention", "exception", "PermissionError"),
    ("autograd_scores_in_files_mapped_shared", "ex15_autograd_flash", "flash_forward_lse", "exception",
     "map memory shared with a file or another process"),
    ("prefaulted_pool_behind_an_undumpable_process", "ex03_tiled_forward", "tiled_attention", "memory",
     ("not even in a buffer allocated", "could not measure")),
    ("kernel_answer_for_relaunch_from_a_known_seed", "ex06_triton_primer", "vector_add", "launch",
     "launched again by the grader on inputs of its own"),
    ("autograd_reads_values_through_repr", "ex15_autograd_flash", "flash_forward_lse", "forbidden",
     "printing tensors of more than"),
    # 12. red team round 17: the relaunch judged on inputs the kernel overwrote or with a tile the call never built,
    # and exercise 15's inputs read through memory the call did not make
    ("kernel_relaunch_inputs_overwritten", "ex12_triton_online_softmax", "online_row_softmax", "launch",
     "it wrote into its input X"),
    ("kernel_relaunch_lse_overwritten", "ex13_triton_backward", "flash_backward_dkdv", "launch",
     "it wrote into its input LSE"),
    ("kernel_relaunch_whole_row_tile", "ex12_triton_online_softmax", "online_row_softmax", "launch",
     "launched again by the grader on inputs of its own, built a tile of"),
    ("kernel_relaunch_whole_split_tile", "ex14_split_kv_decode", "split_kv_partials", "launch",
     "launched again by the grader on inputs of its own, built a tile of 256"),
    ("autograd_reads_values_through_its_own_storage", "ex15_autograd_flash", "flash_forward_lse", "forbidden",
     "into a tensor the call did not make"),
    ("autograd_inputs_copied_into_a_numpy_alias", "ex15_autograd_flash", "flash_forward_lse", "forbidden",
     "into a tensor the call did not make"),
    # 11. honest mistakes a sibling exercise named and this one did not (a feedback hunt, round 16)
    ("tiled_l_not_rescaled", "ex03_tiled_forward", "tiled_attention", "value",
     "looks like the running sum l_i is not rescaled"),
    ("kernel_causal_bottom_right", "ex08_kernel_causal", "flash_forward", "nan",
     "looks like the causal mask is aligned bottom-right"),
    ("kernel_bwd_p_without_lse", "ex13_triton_backward", "flash_backward_dkdv", "value",
     "looks like P is exp(S) without the forward's lse subtracted"),
    ("kernel_bwd_dq_causal_unmasked", "ex13_triton_backward", "flash_backward_dq", "value",
     "looks like the recomputed P is not causally masked"),
    ("kernel_split_per_floor", "ex14_split_kv_decode", "split_kv_partials", "value",
     "looks like the splits are N_K // num_splits keys long"),
    ("kernel_split_lse_max_only", "ex14_split_kv_decode", "split_kv_partials", "value",
     "looks like lse_part holds the running max m alone"),
    ("autograd_backward_without_delta", "ex15_autograd_flash", "forward_and_backward", "value",
     "looks like dS is P * dP without the D_i term"),
    ("autograd_forward_o_not_divided", "ex15_autograd_flash", "flash_forward_lse", "value",
     "looks like o is acc without the division by l_i"),
    ("kernel_row_softmax_first_block_only", "ex12_triton_online_softmax", "online_row_softmax", "value",
     "looks like the max and the sum come from the row's first block only"),
    ("combine_mean_of_splits", "ex14_split_kv_decode", "combine_splits", "value", "looks like the splits are averaged"),
    ("count_tiles_blocks_floored", "ex04_causal_tiles", "count_computed_tiles", "value",
     "looks like the blocks are counted as nq // block_q"),
    ("autograd_backward_p_tile_max", "ex15_autograd_flash", "forward_and_backward", "value",
     "looks like P is recomputed as exp(S - the tile's own row max)"),
    ("bwd_p_tile_max", "ex10_tiled_backward", "tiled_attention_backward", "value",
     "looks like P is recomputed as exp(S - the tile's own row max)"),
    ("kernel_bwd_dq_p_tile_max", "ex13_triton_backward", "flash_backward_dq", "value",
     "looks like P is recomputed as exp(S - the tile's own row max)"),
    ("kernel_row_softmax_lanes_not_rescaled", "ex12_triton_online_softmax", "online_row_softmax", "value",
     "looks like the running sum l_i is not rescaled"),
    ("ds_two_dimensional_only", "ex09_backward_pieces", "softmax_backward", "exception", "could not be broadcast"),
]
OTHER_BROKEN = {"prints_flood", "detaches", "writes_grader", "writes_parent_stdout", "kills_grader",
                "plants_bytecode", "prints_terminal_escapes", "copies_classmate"}  # tests of their own
CONFINED = confine.available()  # Linux with Landlock and seccomp


def test_blocks_many_times_the_sequence_are_a_hidden_case_on_every_seed():
    import numpy as np

    from flashlab.grading import cases

    for seed in range(20):
        kw = [c.kwargs for c in cases.tiled_hidden(np.random.default_rng(seed))]
        assert any(k["q"].shape[-2] * 4 < k["block_q"] for k in kw), seed


def test_every_broken_submission_has_a_case():
    assert {p.stem for p in BROKEN.glob("*.py")} == {row[0] for row in BROKEN_CASES} | OTHER_BROKEN


@pytest.mark.parametrize("module, exercise, part, kind, words", BROKEN_CASES,
                         ids=[f"{r[0]}-{r[2]}" for r in BROKEN_CASES])
def test_broken_submission_is_reported_for_its_check(tmp_path, monkeypatch, module, exercise, part, kind, words):
    if module in ("forks_to_hide_memory", "resets_peak_memory", "library_in_fork", "tampers_import_guard",
                  "reads_solutions_from_disk", "loads_library_copy", "asks_remote_oracle",
                  "scores_in_a_shared_mapping_dropped_page_by_page", "scores_in_a_shared_mapping_through_ctypes",
                  "autograd_scores_in_files_mapped_shared", "scores_spliced_into_a_memfd") and not CONFINED:
        pytest.skip("needs Linux with Landlock and seccomp (flashlab.grading.confine)")
    if module == "claims_gpu" and has_gpu_driver():
        pytest.skip("this machine has a GPU: the claim is true here")
    if module in ("kernel_body_writes_with_torch", "kernel_body_reads_and_writes_through_ctypes",
                  "kernel_relaunch_inputs_overwritten", "kernel_relaunch_lse_overwritten",
                  "kernel_relaunch_whole_split_tile") and has_gpu_driver():
        pytest.skip("a cheat of the CPU interpreter, where a kernel's body is Python (it reads a module global or "
                    "mixes devices); a GPU compiles it, and refuses it for that")
    if module == "kernel_relaunch_whole_row_tile" and has_gpu_driver():
        words = "built a tile of 128"  # a compiled kernel's tile is read from its IR, every branch: the call's check
    if module == "memory_hog":  # the grader's setting (the child never sees it), lowered to keep the test small
        monkeypatch.setenv("FLASHLAB_GRADER_MEMORY_LIMIT", str(1 << 29))
    if module == "fills_disk":
        monkeypatch.setenv("FLASHLAB_GRADER_DISK_LIMIT", str(16 << 20))
    if module == "materialises_in_mmap" and CONFINED:  # Python's mmap.mmap(-1, n) is shared: refused outright
        kind, words = "exception", "map memory shared with a file or another process"
    if module == "kernel_bwd_p_without_lse" and has_gpu_driver():
        words = ""  # tf32 dots: exp(S) is far larger than P, and the gap to the float64 mistake passes the tolerance
    if module == "kernel_idle_while_a_thread_writes" and not has_gpu_driver():
        kind = ("forbidden", kind)  # in the interpreter the thread may also write during the launch itself
        words = (*words, "changed where no tl.store of the launch reached")
    shutil.copy(BROKEN / f"{module}.py", tmp_path / f"{exercise}.py")
    report = check(exercise, exercises_dir=tmp_path, seed=3, time_limit_s=2 if module == "never_returns" else None)
    results = report.graded[0][1]
    result = results[part]
    assert result["status"] == "failed" and result["earned"] == 0, result
    if module.startswith("calls_torch_sdpa_in_a") and has_gpu_driver() and result["failure"]["kind"] == "timeout":
        # refused all the same: on an H200 with 14 grading workers the first torch call in the learner's
        # thread ran past exercise 01's 10 s limit. The cause found later: the first operator under the
        # dispatch mode imported torch._dynamo, compiled from source there (no cached bytecode): over
        # 10 s; the child now imports it before the call (child._install_torch_mode)
        return
    if module == "kernel_answer_behind_an_out_of_bounds_poison" and has_gpu_driver():
        # a compiled kernel's load before Q raises nothing on a GPU: it reads the guard band's NaN, so the output
        # is NaN, and the launch is never rerun on the real values
        assert result["failure"]["kind"] == "nan", result["failure"]
        return
    kinds = kind if isinstance(kind, tuple) else (kind,)
    assert result["failure"]["kind"] in kinds, result["failure"]
    kind = result["failure"]["kind"]
    choices = (words,) if isinstance(words, str) else words  # one of several phrasings, where the device decides
    words = next((w for w in choices if w in result["failure"]["message"]), choices[0])
    assert words in result["failure"]["message"], result["failure"]["message"]
    text = str(report)
    assert words in text and "FAIL" in text
    assert report.score <= report.total and all(r["earned"] <= r["points"] for r in report.results)
    if kind in checks.RULE_KINDS and result["failure"]["case"]:  # a broken rule is not the failing case's topic
        assert result["failure"]["why"] == checks.RULE_WHY and "hint" not in result["failure"], result["failure"]
        assert f"this check: {checks.RULE_WHY}" in text or f"this check (public, the same on every run): {checks.RULE_WHY}" in text
    if module in ("no_causal_skip", "kernel_no_causal_skip", "kernel_loop_bound_no_nq"):
        assert "skips fully masked tiles" in result["failure"]["why"]
    if module in ("never_returns", "crashes_process"):  # the other parts are still graded after it
        assert result["public"] == [0, 3]  # counted, not hidden behind the timeout or crash
        assert results["naive_hbm_bytes"]["status"] == "passed"


def test_processes_left_behind_are_killed(tmp_path):
    pid_file = Path("/tmp/flashlab_detached.pid")
    pid_file.unlink(missing_ok=True)
    shutil.copy(BROKEN / "detaches.py", tmp_path / "ex01_naive.py")
    result = check("ex01_naive", exercises_dir=tmp_path, seed=3, public_only=True).results[0]
    if CONFINED:  # the child may not start a process at all: nothing is left behind
        assert not pid_file.exists() and "may not start processes" in result["failure"]["message"], result
        return
    pid = int(pid_file.read_text())
    for _ in range(50):  # SIGKILL was sent; let it land
        try:  # gone, or a zombie waiting for this process (a child subreaper) to reap it
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            state = "gone"
        if state in ("gone", "Z", "X"):
            break
        time.sleep(0.1)
    assert state in ("gone", "Z", "X"), f"the detached process {pid} is still running ({state})"


def test_processes_that_carry_the_session_token_are_killed():
    # Where the child may start processes (Triton on a GPU runs its compiler as one), whatever carries
    # the session's token is killed after the exercise, even when it left the session.
    from flashlab.grading.sandbox import TOKEN_VAR, kill_leftovers

    token, since = "0123456789abcdef", time.time()
    proc = subprocess.Popen(["sleep", "60"], env=dict(os.environ, **{TOKEN_VAR: token}), start_new_session=True)
    try:
        time.sleep(0.1)
        kill_leftovers(token, since)
        assert proc.wait(5) == -9  # SIGKILL
    finally:
        proc.kill()


def test_a_module_that_kills_the_grader_is_graded_and_the_grader_lives(tmp_path):
    if confine.landlock_abi() < 6:
        pytest.skip("signals are scoped by Landlock ABI 6 (Linux 6.12) and later")
    shutil.copy(BROKEN / "kills_grader.py", tmp_path / "ex01_naive.py")
    out = subprocess.run([sys.executable, "-m", "flashlab.cli", "grade", "ex01_naive", "--exercises-dir", str(tmp_path),
                          "--json", "--seed", "3", "--public-only"], capture_output=True, text=True, timeout=600)
    failure = json.loads(out.stdout)["exercises"][0]["parts"][0]["failure"]  # the grader lived to print it
    assert failure["kind"] == "exception" and "signal other processes" in failure["message"], failure


def test_bytecode_planted_for_the_graders_next_run_is_refused_or_found(tmp_path):
    import importlib.util

    source = Path(importlib.util.find_spec("flashlab.grading.checks").origin)
    target = Path(importlib.util.cache_from_source(str(source)))
    existed = target.exists()
    shutil.copy(BROKEN / "plants_bytecode.py", tmp_path / "ex01_naive.py")
    try:
        report = check("ex01_naive", exercises_dir=tmp_path, seed=3, public_only=True)
        planted = target.exists() and not existed
    finally:
        if target.exists() and not existed:
            target.unlink()
    kinds = {r["failure"]["kind"] for r in report.results}
    if CONFINED:  # the child may change files only in its own folder
        assert not planted and kinds == {"value", "missing"}, report.results
    else:  # the parent's digest covers the package's bytecode: no verdict
        assert not planted or (kinds == {"tampered"} and report.score == 0), report.results


def test_a_module_that_rewrites_the_grader_gets_no_verdict(tmp_path):
    targets = [REPO / "src" / "flashlab" / "grading" / "registry.py", REPO / "solutions" / "ex01_naive.py"]
    before = {t: t.read_bytes() for t in targets}
    shutil.copy(BROKEN / "writes_grader.py", tmp_path / "ex01_naive.py")
    try:
        report = check("ex01_naive", exercises_dir=tmp_path, seed=3, public_only=True)
        changed = [t for t in targets if t.read_bytes() != before[t]]
    finally:
        for target, data in before.items():
            target.write_bytes(data)
    kinds = {r["failure"]["kind"] for r in report.results}
    if changed:  # the child could write (it runs as root without a user to drop to): no verdict
        assert kinds == {"tampered"} and report.score == 0, report.results
    else:  # the child ran as an unprivileged user: nothing changed, normal verdicts
        assert "tampered" not in kinds


def test_json_stays_json_when_the_module_writes_to_our_stdout(tmp_path):
    shutil.copy(BROKEN / "writes_parent_stdout.py", tmp_path / "ex01_naive.py")
    out = subprocess.run([sys.executable, "-m", "flashlab.cli", "grade", "ex01_naive", "--exercises-dir", str(tmp_path),
                          "--json", "--seed", "3", "--public-only"], capture_output=True, text=True, timeout=600)
    report = json.loads(out.stdout)  # nothing but the JSON on stdout
    assert report["score"] == 0 and "999" not in out.stdout


def test_terminal_escapes_from_the_learners_code_are_shown_not_obeyed(tmp_path):
    shutil.copy(BROKEN / "prints_terminal_escapes.py", tmp_path / "ex01_naive.py")
    report = check("ex01_naive", exercises_dir=tmp_path, seed=3, public_only=True)
    text = str(report)
    assert "\x1b" not in text and "\r" not in text, text
    assert "raised RuntimeError: \\x1b[1A\\x1b[2K\\x0dPASS" in text and "printed: \\x1b[2J" in text, text
    assert report.results[0]["status"] == "failed"


def test_in_a_batch_a_student_cannot_read_a_classmates_folder(tmp_path):
    if not CONFINED:
        pytest.skip("needs Linux with Landlock (flashlab.grading.confine)")
    from flashlab.grading.classroom import grade_batch

    for student, source in (("a_copier", BROKEN / "copies_classmate.py"),
                            ("b_honest", REPO / "solutions" / "ex01_naive.py")):
        (tmp_path / student).mkdir()
        shutil.copy(source, tmp_path / student / "ex01_naive.py")
    batch = dict(grade_batch(tmp_path, ["ex01_naive"], seed=3, public_only=True, progress=lambda line: None))
    copier = batch["a_copier"][0][1]["naive_attention"]
    assert copier["earned"] == 0 and copier["failure"]["kind"] == "load", copier["failure"]
    assert "Permission denied" in copier["failure"]["message"], copier["failure"]
    assert all(r["status"] == "public passed" for r in batch["b_honest"][0][1].values())


def test_graded_alone_a_student_cannot_read_a_classmate_nor_another_copy_of_the_answers(tmp_path):
    # an instructor regrading one folder of a class (--exercises-dir), or a copy of the course elsewhere on
    # the machine: the child reads only where Python and its libraries live and the folder graded
    if not CONFINED:
        pytest.skip("needs Linux with Landlock (flashlab.grading.confine)")
    for student, source in (("a_copier", BROKEN / "copies_classmate.py"),
                            ("b_honest", REPO / "solutions" / "ex01_naive.py")):
        (tmp_path / student).mkdir()
        shutil.copy(source, tmp_path / student / "ex01_naive.py")
    shutil.copytree(REPO / "solutions", tmp_path / "another_copy" / "solutions")
    (tmp_path / "c_elsewhere").mkdir()
    (tmp_path / "c_elsewhere" / "ex01_naive.py").write_text(
        f"exec(open({str(tmp_path / 'another_copy' / 'solutions' / 'ex01_naive.py')!r}).read())\n")
    for student in ("a_copier", "c_elsewhere"):
        report = check("ex01_naive", exercises_dir=tmp_path / student, seed=3, public_only=True)
        failure = report.results[0]["failure"]
        assert report.score == 0 and failure["kind"] == "load" and "Permission denied" in failure["message"], failure
    assert check("ex01_naive", exercises_dir=tmp_path / "b_honest", seed=3, public_only=True).results[0]["status"] \
        == "public passed"


def test_the_child_cannot_list_folders_beyond_its_own_and_the_libraries(tmp_path):
    # file names in another child's home would carry data between two children graded at once
    if not CONFINED:
        pytest.skip("needs Linux with Landlock (flashlab.grading.confine)")
    (tmp_path / "ex01_naive.py").write_text(
        "import os\n"
        "open(os.path.join(os.environ['HOME'], 'mine'), 'w').close()\n"
        "mine = os.listdir(os.environ['HOME'])\n"
        "try:\n    os.listdir(os.path.dirname(os.environ['HOME']))\n    seen = 'listed'\n"
        "except PermissionError:\n    seen = 'refused'\n"
        "raise RuntimeError(f'parent of home {seen}; own home listed: {\"mine\" in mine}')\n")
    message = check("ex01_naive", exercises_dir=tmp_path, seed=3, public_only=True).results[0]["failure"]["message"]
    assert "parent of home refused; own home listed: True" in message, message


def test_the_child_may_open_no_socket_message_queue_or_key_ring(tmp_path):
    # each would hold data out of the grader's measurements, or reach another grading child
    if not CONFINED:
        pytest.skip("needs Linux with Landlock and seccomp (flashlab.grading.confine)")
    (tmp_path / "ex01_naive.py").write_text(
        "import ctypes, socket\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "seen = []\n"
        "for name, call in (('unix socket', lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)),\n"
        "                   ('socketpair', socket.socketpair)):\n"
        "    try:\n        call()\n        seen.append(name + ' opened')\n"
        "    except OSError:\n        seen.append(name + ' refused')\n"
        "seen.append('msgget ' + ('refused' if libc.msgget(0, 0o1600) < 0 else 'opened'))\n"
        "seen.append('add_key ' + ('refused' if libc.syscall(248 if ctypes.sizeof(ctypes.c_void_p) == 8 and "
        "__import__('platform').machine() == 'x86_64' else 217, b'user', b'k', b'v', 1, -3) < 0 else 'opened'))\n"
        "raise RuntimeError('; '.join(seen))\n")
    message = check("ex01_naive", exercises_dir=tmp_path, seed=3, public_only=True).results[0]["failure"]["message"]
    for name in ("unix socket", "socketpair", "msgget", "add_key"):
        assert f"{name} refused" in message, message


def test_a_submission_that_links_to_the_solutions_is_not_graded(tmp_path):
    (tmp_path / "ex01_naive.py").symlink_to(REPO / "solutions" / "ex01_naive.py")
    report = check("ex01_naive", exercises_dir=tmp_path, seed=3, public_only=True)
    assert report.score == 0 and {r["failure"]["kind"] for r in report.results} == {"load"}, report.results
    assert "is a link to" in report.results[0]["failure"]["message"]
    assert check("ex01_naive", exercises_dir=REPO / "solutions", seed=3, public_only=True).results[0]["status"] \
        == "public passed"  # grading solutions/ itself still works


def test_a_batch_submission_that_links_out_of_its_folder_is_not_graded(tmp_path):
    # a link to a correct file anywhere on the grading machine (the project's tests, a work area) is not the
    # student's own work; the grader refuses it before reading it
    from flashlab.grading.classroom import grade_batch

    student = tmp_path / "submissions" / "alice"
    student.mkdir(parents=True)
    (student / "ex01_naive.py").symlink_to(REPO / "tests" / "honest_variants" / "ex07_float32_then_cast.py")
    (student / "ex02_softmax.py").symlink_to(tmp_path / "elsewhere.py")
    shutil.copy(REPO / "solutions" / "ex02_softmax.py", tmp_path / "elsewhere.py")
    batch = dict(grade_batch(tmp_path / "submissions", ["ex01_naive", "ex02_softmax"], seed=3, public_only=True,
                             progress=lambda line: None))
    for _, graded in batch["alice"]:
        for result in graded.values():
            assert result["earned"] == 0 and result["failure"]["kind"] == "load", result
            assert "is a link to" in result["failure"]["message"] and "outside" in result["failure"]["message"]


def test_a_hard_link_to_the_answers_and_a_linked_student_folder_are_not_graded(tmp_path):
    # a hard link has no "outside" to see: it is the answer file itself under another name
    try:
        os.link(REPO / "solutions" / "ex01_naive.py", tmp_path / "ex01_naive.py")
    except OSError:
        pytest.skip("no hard link from here to the repository (another file system)")
    report = check("ex01_naive", exercises_dir=tmp_path, seed=3, public_only=True)
    assert report.score == 0 and "is a hard link to" in report.results[0]["failure"]["message"], report.results
    from flashlab.grading.classroom import grade_batch

    (tmp_path / "batch").mkdir()
    (tmp_path / "batch" / "mallory").symlink_to(REPO / "solutions")
    batch = dict(grade_batch(tmp_path / "batch", ["ex01_naive"], seed=3, public_only=True, progress=lambda line: None))
    result = batch["mallory"][0][1]["naive_attention"]
    assert result["earned"] == 0 and "the folder mallory is a link to" in result["failure"]["message"], result


@pytest.mark.skipif(not CONFINED, reason="needs Linux with Landlock and seccomp (flashlab.grading.confine)")
def test_the_childs_seccomp_filter_refuses_shared_mappings_and_keeps_private_memory(tmp_path):
    # run in a process of its own: the filter cannot be lifted once set
    code = (
        "import mmap, os, numpy as np\n"
        "from flashlab.grading import confine\n"
        "assert confine.forbid_processes()\n"
        "def refused(f):\n"
        "    try:\n"
        "        f()\n"
        "    except OSError as exc:\n"
        "        return exc.errno == 1\n"
        "    return False\n"
        "fd = os.memfd_create('x'); os.ftruncate(fd, 1 << 20)\n"
        "assert refused(lambda: mmap.mmap(fd, 1 << 20, flags=mmap.MAP_SHARED))\n"
        "assert refused(lambda: mmap.mmap(-1, 1 << 20))  # shared and anonymous: Python's default\n"
        "private = mmap.mmap(fd, 1 << 20, flags=mmap.MAP_PRIVATE); private[:4] = b'ok!!'\n"
        "anonymous = mmap.mmap(-1, 1 << 20, flags=mmap.MAP_PRIVATE)\n"
        "anonymous.madvise(mmap.MADV_DONTNEED)  # what malloc does: allowed\n"
        "assert refused(lambda: anonymous.madvise(21))  # MADV_PAGEOUT: to swap, out of the resident size\n"
        "import ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "assert libc.prctl(4, 0, 0, 0, 0) == -1  # PR_SET_DUMPABLE\n"
        "r, w = os.pipe()\n"
        "assert libc.splice(r, None, fd, None, 4096, 0) == -1 and ctypes.get_errno() == 1  # not counted by wchar\n"
        "assert libc.vmsplice(w, None, 0, 0) == -1 and ctypes.get_errno() == 1\n"
        "x = np.random.default_rng(0).standard_normal((512, 512)); assert np.isfinite((x @ x).sum())\n"
        "print('ok')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(REPO / "src")))
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_the_relaunch_inputs_are_not_predictable_from_the_grading_seed(monkeypatch):
    from flashlab.grading import checks

    monkeypatch.delenv("FLASHLAB_GRADER_REPLAY_SALT", raising=False)
    assert len({checks.replay_salt() for _ in range(4)}) == 4  # 63 random bits each
    monkeypatch.setenv("FLASHLAB_GRADER_REPLAY_SALT", "12")
    assert checks.replay_salt() == 12
    monkeypatch.setenv("FLASHLAB_GRADER_REPLAY_SALT", "twelve")
    with pytest.raises(ValueError, match="FLASHLAB_GRADER_REPLAY_SALT"):
        checks.replay_salt()
    from flashlab.grading.sandbox import child_environment

    assert "FLASHLAB_GRADER_REPLAY_SALT" not in child_environment(os.environ)


def test_the_child_runs_under_cpu_and_file_size_limits(tmp_path):
    # RLIMIT_FSIZE keeps a flood written straight to fd 2 (the child's private stderr file) off the disk.
    (tmp_path / "ex01_naive.py").write_text(
        "import resource\n"
        "def naive_attention(q, k, v, causal=False, scale=None):\n"
        "    raise RuntimeError(f'limits {resource.getrlimit(resource.RLIMIT_CPU)[0]} '\n"
        "                       f'{resource.getrlimit(resource.RLIMIT_FSIZE)[0]}')\n")
    from flashlab.grading.sandbox import CPU_LIMIT_S, FILE_LIMIT

    failure = check("ex01_naive", exercises_dir=tmp_path, seed=3, public_only=True).results[0]["failure"]
    assert f"limits {CPU_LIMIT_S} {FILE_LIMIT}" in failure["message"], failure


def test_course_sources_above_the_current_directory_are_hidden_from_the_child(tmp_path, monkeypatch):
    # Gradescope: an installed flashlab runs from /autograder/source, whose src/flashlab is the source
    from flashlab.grading.checks import hidden_paths

    (tmp_path / "source" / "src" / "flashlab").mkdir(parents=True)
    (tmp_path / "source" / "instructor").mkdir()
    monkeypatch.chdir(tmp_path / "source")
    hidden = hidden_paths()
    assert {str((tmp_path / "source" / name).resolve()) for name in ("src/flashlab", "instructor")} <= set(hidden)
    assert str(Path(__file__).resolve().parents[1] / "solutions") in hidden  # and the repository's own


def test_what_the_child_may_read_leaves_out_hidden_folders_and_links_to_them(tmp_path):
    for name in ("course/solutions", "course/src", "other"):
        (tmp_path / name).mkdir(parents=True)
    (tmp_path / "link_to_course").symlink_to(tmp_path / "course")
    (tmp_path / "course" / "link_to_solutions").symlink_to(tmp_path / "course" / "solutions")
    readable = confine._everything_but([str(tmp_path / "course" / "solutions")])
    assert str(tmp_path / "other") in readable and str(tmp_path / "course" / "src") in readable
    hidden, above = str(tmp_path / "course" / "solutions"), (str(tmp_path), str(tmp_path / "course"))
    assert not any(p.startswith(hidden) or p in above for p in readable), readable


def test_what_the_child_may_read_is_its_roots_less_the_hidden_folders(tmp_path):
    for name in ("venv/lib", "course/src/flashlab", "course/src/other", "course/solutions", "elsewhere"):
        (tmp_path / name).mkdir(parents=True)
    roots = [str(tmp_path / "venv"), str(tmp_path / "course" / "src"), str(tmp_path / "course" / "solutions" )]
    readable = confine._everything_but([str(tmp_path / "course" / "src" / "flashlab"),
                                        str(tmp_path / "course" / "solutions")], roots)
    assert readable == sorted([str(tmp_path / "venv"), str(tmp_path / "course" / "src" / "other")]), readable
    roots = confine.readable_roots([str(tmp_path / "elsewhere")])
    assert sys.prefix in roots and "/usr" in roots and str(tmp_path / "elsewhere") in roots
    assert str(tmp_path) not in roots and str(Path.home()) not in roots


def test_gradescope_results_file(tmp_path):
    shutil.copy(BROKEN / "crashes_process.py", tmp_path / "ex01_naive.py")
    target = tmp_path / "results.json"
    rc = main(["ex01_naive", "--exercises-dir", str(tmp_path), "--seed", "3", "--gradescope", str(target)])
    results = json.loads(target.read_text())
    assert rc == 1 and results["score"] == 1 and results["max_score"] == 3
    tests = {t["name"].split(" ")[1]: t for t in results["tests"]}
    assert set(tests) == {"naive_attention", "naive_hbm_bytes"}
    assert tests["naive_attention"]["score"] == 0 and tests["naive_attention"]["max_score"] == 2
    assert "grading process died" in tests["naive_attention"]["output"]
    assert tests["naive_hbm_bytes"]["score"] == 1 and all(t["visibility"] == "visible" for t in results["tests"])


def test_quiz_accepts_a_leading_letter_and_asks_for_one_otherwise():
    assert [choice_letter(a) for a in ("b", "B.", "(a) the matmul FLOPs", " c) exact", "bad", 2)] == \
        ["b", "b", "a", "c", None, None]
    report = check("ex11_quiz", {"Q1": "(b) reads and writes of HBM", "Q2": "the matmul FLOPs"}, seed=3)
    q1, q2 = report.results
    assert q1["status"] == "passed" and q2["status"] == "failed"
    assert "answer with one letter" in q2["failure"]["message"]


def test_a_written_body_that_still_raises_is_told_which_line(tmp_path):
    source = (REPO / "solutions" / "ex07_kernel_inner_loop.py").read_text()
    marker = "    z, nq, d = q.shape\n"
    assert marker in source, "the solution changed: update this test"
    source = source.replace(marker, marker + "    raise NotImplementedError(\"Exercise 07\")  # delete once done\n", 1)
    (tmp_path / "ex07_kernel_inner_loop.py").write_text(source)
    line = source.splitlines().index('    raise NotImplementedError("Exercise 07")  # delete once done') + 1
    result = check("ex07_kernel_inner_loop", exercises_dir=tmp_path, seed=3, public_only=True).results[0]
    assert result["status"] == "failed", result
    assert f"still raises NotImplementedError at line {line}: delete that line" in result["failure"]["message"]


def test_counts_show_partial_progress_and_hint_commands(tmp_path):
    shutil.copy(BROKEN / "ignores_scale.py", tmp_path / "ex03_tiled_forward.py")
    report = check("ex03_tiled_forward", exercises_dir=tmp_path, seed=3, hint=1)
    result = report.results[0]
    passed, total = result["checks"]
    assert result["earned"] == 0 and 0 < passed < total  # keeps going after the failing case
    assert f"{passed} of {total} checks passed" in str(report)
    assert 'check("ex03_tiled_forward", hint=2)' in str(report)
    shell = type(report)(report.graded, hint=1, shell=True)
    assert "flashlab grade ex03_tiled_forward --hint 2" in str(shell)


def test_solutions_stay_within_the_memory_budget_measured_from_outside():
    from flashlab.grading import checks
    from flashlab.grading.registry import get_exercise
    from flashlab.grading.sandbox import unprivileged_uid

    for name in ("ex03_tiled_forward", "ex10_tiled_backward"):
        exercise = get_exercise(name)
        part = exercise.parts[0]
        session = checks.Session(exercise, str(REPO / "solutions" / f"{name}.py"), None, unprivileged_uid())
        try:
            assert session.start() is None
            memory_cases = [c for c in part.hidden(np.random.default_rng(3)) if c.max_peak_bytes]
            assert len(memory_cases) == 2  # 65536 keys, and the long row (2^20 keys, 8 query rows)
            for case in memory_cases:
                answers = part.reference(**case.kwargs)
                answers = answers if isinstance(answers, tuple) else (answers,)
                lost, record = session.call(part, case, 60.0, measure=True,
                                            expected_bytes=sum(a.nbytes for a in answers))
                assert lost is None and record["extra_bytes"] is not None, record
                # dK and dV of the long row (64 MiB) are the solution's to hold; the rest at most half the limit
                extra, allowed = record["extra_bytes"] - case.peak_outputs, case.max_peak_bytes - case.peak_outputs
                assert extra < allowed / 2, (name, case.label, record["extra_bytes"])
                full = case.kwargs["q"].shape[-2] * case.kwargs["k"].shape[-2] * 4  # one Nq x Nk float32 array
                assert record["referenced_bytes"] < full / 4, (name, record["referenced_bytes"])  # the limit: full / 2
                assert record["written_bytes"] < 1 << 20, (name, record["written_bytes"])  # the limit is full / 2
        finally:
            session.stop()


def test_an_array_is_sent_as_its_own_bytes_so_digests_and_results_add_no_copy_to_the_peak():
    """The child digests every input after the call and encodes the value before the parent reads
    its peak: a copy there (tobytes) added the largest input's size (32 MiB for K in the long-row
    case) to every peak, more than the one row of scores the case must catch."""
    from flashlab.grading import wire

    k = np.random.default_rng(3).standard_normal((1 << 12, 4))  # (Nk, d)
    buffers: list = []
    record = wire.encode((k, k[:, :2], np.float64(2.0), np.zeros((3, 0))), buffers)
    assert np.shares_memory(np.frombuffer(buffers[0], dtype=k.dtype), k)  # the array's own memory
    assert [len(b) for b in buffers] == [k.nbytes, k[:, :2].nbytes, 0]  # sizes in bytes, as the frame needs
    value = wire.decode(record, [bytes(b) for b in buffers])
    assert np.array_equal(value[0], k) and np.array_equal(value[1], k[:, :2]) and value[2] == 2.0
    assert value[3].shape == (3, 0)


@pytest.mark.parametrize("exercise, function, refused", [
    ("ex03_tiled_forward", "tiled_attention", True),
    ("ex15_autograd_flash", "flash_forward_lse", False),
])
def test_memory_held_before_the_call_is_judged_where_the_array_dwarfs_the_churn(exercise, function, refused):
    """Touching 0.7 of an Nq x Nk array of memory held before the call (a pool) is refused in the
    NumPy exercises' 128 MiB cases; exercise 15's 32 MiB case does not judge it, since an honest
    torch call there touches 10-24 MiB (its peak is still judged)."""
    from flashlab.grading import checks
    from flashlab.grading.registry import get_exercise

    part = next(p for p in get_exercise(exercise).parts if p.function == function)
    case = next(c for c in part.hidden(np.random.default_rng(3)) if c.max_peak_bytes)
    q, k = case.kwargs["q"], case.kwargs["k"]
    full = q.shape[-2] * k.shape[-2] * q.dtype.itemsize
    expected = part.reference(**case.kwargs)  # a right answer: only the memory is judged
    digests = {name: checks._digest(value) for name, value in case.kwargs.items()}  # inputs left as they were
    record = dict(op="result", value=expected, extra_bytes=0, written_bytes=0, digests=digests,
                  referenced_bytes=int(0.7 * full), live=dict(tensor_peak=0, at_peak=[]))
    failure = checks.judge(part, case, record, expected, False, None)
    assert (failure is not None) == refused, failure
    if refused:
        assert failure["kind"] == "memory" and "read or wrote" in failure["message"], failure
    over_peak = checks.judge(part, case, dict(record, referenced_bytes=0, extra_bytes=2 * case.max_peak_bytes),
                             expected, False, None)
    assert over_peak is not None and over_peak["kind"] == "memory" and "at peak" in over_peak["message"], over_peak


def test_tensors_held_at_once_are_counted_exactly_views_and_inputs_free_a_pool_in_full():
    """child.LiveBytes under a dispatch mode as the grader's (which calls it after every operator): a
    fresh tensor counts its bytes until freed, a view of it or of an input nothing, a buffer held
    before the call in full once an operator writes it; the peak and the largest tensors then are
    what the parent reports."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from flashlab.grading.child import LiveBytes

    q = torch.randn(64, 4, dtype=torch.float64)  # an input: 2 KiB, never counted
    pool = torch.empty(1024, dtype=torch.float64)  # held before the call: 8 KiB
    live = LiveBytes([q])

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            live.after(func, args, kwargs or {}, out)
            return out

    with Count():
        s = q @ q.T  # (64, 64): 32 KiB
        row = s[0]  # a view: nothing
        assert live.now == 32 << 10 and row.shape == (64,)
        del s, row
        assert live.now == 0  # freed
        q[:2].clone()  # 64 B, freed at once
        pool[:8].copy_(q[:2].reshape(-1))  # writes into the pool: all 8 KiB of it count
        assert live.now == 8 << 10
    assert live.peak == 32 << 10
    assert live.largest() == [[32 << 10, "(64, 64) float64 from aten.mm"]]


def test_the_count_of_tensors_held_at_once_is_required_where_a_case_asks_for_it():
    from flashlab.grading import checks
    from flashlab.grading.registry import get_exercise

    part = get_exercise("ex15_autograd_flash").parts[0]
    case = next(c for c in part.hidden(np.random.default_rng(3)) if c.max_live_bytes)
    expected = part.reference(**case.kwargs)
    digests = {name: checks._digest(value) for name, value in case.kwargs.items()}
    record = dict(op="result", value=expected, extra_bytes=0, written_bytes=0, digests=digests, referenced_bytes=0)
    for live in (None, dict(tensor_peak="0", at_peak=[]), dict(tensor_peak=0)):
        failure = checks.judge(part, case, dict(record, live=live), expected, False, None)
        assert failure["kind"] == "memory" and "could not count" in failure["message"], failure
    over = dict(tensor_peak=case.max_live_bytes + 1, at_peak=[[1 << 19, "(1, 8, 8192) float64 from aten.bmm"]])
    failure = checks.judge(part, case, dict(record, live=over), expected, False, None)
    assert failure["kind"] == "memory" and "(1, 8, 8192) float64 from aten.bmm (512 KiB)" in failure["message"]
    assert checks.judge(part, case, dict(record, live=dict(tensor_peak=case.max_live_bytes, at_peak=[])),
                        expected, False, None) is None


def test_tritons_shape_refusal_of_a_dot_is_explained():
    from flashlab.grading.registry import get_exercise

    part = get_exercise("ex07_kernel_inner_loop").parts[0]
    case = part.public(np.random.default_rng(0))[0]
    record = dict(op="result", exception="InterpreterError: AssertionError('input and other must have equal "
                  "reduction dimensions')", digests={})
    failure = checks.judge(part, case, record, None, False, None)
    assert failure["kind"] == "exception" and "load K as a (HEAD_DIM, BLOCK_N) tile" in failure["message"], failure


def test_a_memory_check_the_grader_cannot_measure_gets_no_credit():
    # A child that made itself non-dumpable after loading refuses a non-root grader its clear_refs.
    from flashlab.grading import checks
    from flashlab.grading.registry import get_exercise

    part = get_exercise("ex03_tiled_forward").parts[0]
    case = next(c for c in part.hidden(np.random.default_rng(3)) if c.max_peak_bytes)
    failure = checks.judge(part, case, dict(op="result", unmeasurable=True), None, False, None)
    assert failure["kind"] == "memory" and "could not measure" in failure["message"], failure


def test_printing_floods_are_truncated_and_the_check_still_passes(tmp_path):
    shutil.copy(BROKEN / "prints_flood.py", tmp_path / "ex01_naive.py")
    result = check("ex01_naive", exercises_dir=tmp_path, public_only=True, seed=3).graded[0][1]["naive_attention"]
    assert result["status"] == "public passed" and result["earned"] == 0  # hidden checks did not run
    assert any("only the first 2,000 were kept" in note for note in result["notes"]), result["notes"]


def test_check_grades_a_function_object_and_honours_the_env_dir(monkeypatch):
    def safe_softmax(x):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    report = check("ex02_softmax", safe_softmax, seed=3)
    assert [r["status"] for r in report.results] == ["passed"]
    report = check("ex02_softmax", {"safe_softmax": lambda x: np.exp(x) / np.exp(x).sum(-1, keepdims=True)}, seed=3)
    assert report.results[0]["failure"]["kind"] == "nan"
    monkeypatch.setenv("FLASHLAB_EXERCISES_DIR", str(REPO / "solutions"))
    assert check("ex04_causal_tiles", seed=3).passed
    monkeypatch.setenv("FLASHLAB_EXERCISES_DIR", str(REPO / "no_such_folder"))
    with pytest.raises(ValueError, match="FLASHLAB_EXERCISES_DIR"):
        check("ex04_causal_tiles")


def test_grading_a_kernel_function_object_after_the_gpu_was_used_says_to_grade_the_file(monkeypatch):
    # fn= grades in a fork; a process that has opened CUDA cannot hand the GPU to its fork
    import flashlab.grading.checks as checks

    monkeypatch.setattr(checks, "_cuda_initialized", lambda: True)
    with pytest.raises(RuntimeError, match="grades function objects in a fork of this process") as info:
        check("ex07_kernel_inner_loop", lambda q, k, v, causal=False, scale=None: q, seed=3)
    assert "exercises/ex07_kernel_inner_loop.py" in str(info.value) and "fn=" in str(info.value)
    # a NumPy exercise never touches the GPU: its function objects are still graded
    assert check("ex02_softmax", {"safe_softmax": _safe_softmax}, seed=3).results[0]["status"] == "passed"


@pytest.mark.skipif(not has_gpu_driver(), reason="needs a GPU: a process that has opened CUDA")
@pytest.mark.parametrize("opened_by", ["torch.zeros(1, device='cuda')", "torch.cuda.is_available()"])
def test_on_a_gpu_fn_after_cuda_was_opened_raises_the_clear_error(opened_by):
    code = (f"import importlib.util, torch; {opened_by}\n"
            f"spec = importlib.util.spec_from_file_location('m', {str(REPO / 'solutions' / 'ex07_kernel_inner_loop.py')!r})\n"
            "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
            "from flashlab.grading import check\n"
            "try:\n    check('ex07_kernel_inner_loop', fn=m.flash_forward, seed=3)\n"
            "except RuntimeError as e:\n    print('refused:', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert "refused: fn= grades function objects in a fork" in out.stdout, out.stdout + out.stderr


def _safe_softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _tiled_via_the_library(q, k, v, causal=False, scale=None, block_q=64, block_k=64):
    return _library_tiled(q, k, v, causal=causal, scale=scale, block_q=block_q, block_k=block_k)


def test_notebook_function_calling_a_library_function_bound_before_grading_is_reported():
    # A notebook cell ran `from flashlab.tiled import tiled_attention` before check(): the name is
    # bound to the original in the notebook's globals, which the grading fork inherits.
    result = check("ex03_tiled_forward", _tiled_via_the_library, seed=3).results[0]
    assert result["status"] == "failed" and result["failure"]["kind"] == "forbidden", result["failure"]
    assert "called flashlab.tiled.tiled_attention" in result["failure"]["message"]


_captured = (lambda f: lambda *a, **kw: f(*a, **kw))(getattr(_library_tiled, "__wrapped__", _library_tiled))


def tiled_attention(q, k, v, causal=False, scale=None, block_q=64, block_k=64):
    return _captured(q, k, v, causal=causal, scale=scale, block_q=block_q, block_k=block_k)


def test_library_function_captured_in_a_closure_before_grading_is_reported():
    result = check("ex03_tiled_forward", tiled_attention, seed=3).results[0]
    assert result["failure"]["kind"] == "forbidden", result["failure"]
    assert "called flashlab.tiled" in result["failure"]["message"]


def test_hidden_cases_are_fresh_per_seed_and_public_cases_fixed():
    part = EXERCISES["ex03_tiled_forward"].parts[0]
    a, b = part.hidden(np.random.default_rng(1)), part.hidden(np.random.default_rng(2))
    assert any(x.label != y.label or not np.array_equal(x.kwargs["q"], y.kwargs["q"]) for x, y in zip(a, b))
    p1, p2 = part.public(np.random.default_rng(7)), part.public(np.random.default_rng(7))
    assert all(np.array_equal(x.kwargs["q"], y.kwargs["q"]) for x, y in zip(p1, p2))


def test_an_untouched_stub_shows_its_hints_when_they_are_asked_for():

    report = check("ex02_softmax", exercises_dir=REPO / "exercises", public_only=True, seed=3)
    hints = EXERCISES["ex02_softmax"].parts[0].hints
    assert hints[0] not in str(report), "a stub not attempted yet shows no hint unasked"
    asked = Report(report.graded, hint=3)
    assert all(h in str(asked) for h in hints[:3]), str(asked)


def test_hint_levels_unfold_one_at_a_time(tmp_path):
    shutil.copy(BROKEN / "wrong_values.py", tmp_path / "ex02_softmax.py")
    report = check("ex02_softmax", exercises_dir=tmp_path, hint=1, public_only=True, seed=3)
    hints = EXERCISES["ex02_softmax"].parts[1].hints
    assert hints[0] in str(report) and hints[1] not in str(report)
    assert "not yet run" in str(report)  # honest counts: the checks after the failure did not pass
    report.next_hint()
    assert hints[1] in str(report) and html.escape(hints[1]) in report._repr_html_()  # the HTML escapes quotes


def test_the_hint_for_the_failing_check_comes_first_and_the_rest_unfold_in_order(tmp_path):
    """Two empty states that combine to NaN were shown hint 1 (about reference maxima); the check
    points at hint 2 (a side with m = -inf has factor 0), which the report shows first."""
    source = (REPO / "solutions" / "ex02_softmax.py").read_text()
    old = "alpha = np.where(np.isneginf(m_a), 0.0, np.exp(m_a - m_safe))"
    assert old in source, "the solution changed: update this test"
    (tmp_path / "ex02_softmax.py").write_text(source.replace(old, "alpha = np.exp(m_a - m)"))
    report = check("ex02_softmax", exercises_dir=tmp_path, seed=3)
    result = report.graded[0][1]["combine_states"]
    hints = result["hints"]
    assert "empty" in result["failure"]["case"] and result["failure"]["hint"] == 2, result["failure"]
    text = str(report)
    assert f"hint 2 of 3, for this check: {hints[1]}" in text and hints[0] not in text, text
    assert 'hint=1))' in text and "--hint 1)" in str(Report(report.graded, shell=True))
    assert report.shown_hints(result) == [2]
    assert report.next_hint().shown_hints(result) == [2, 1], "next_hint() adds hint 1, the lowest not shown"
    assert str(report).index(hints[1]) < str(report).index(hints[0]), "the hint for this check stays first"
    assert report.next_hint().shown_hints(result) == [2, 1, 3] and "of 3: check(" not in str(report)
    assert Report(report.graded, hint=1).shown_hints(result) == [2, 1], "hint=N: hints 1 to N and this check's"
    assert Report(report.graded, hint=3).shown_hints(result) == [2, 1, 3]
    assert Report(report.graded, hint=0).shown_hints(result) == [], "hint=0: none"
    gradescope = next(t["output"] for t in report.gradescope()["tests"] if "combine_states" in t["name"])
    assert "hint 2 of 3, for this check:" in gradescope


def test_a_skip_rule_that_takes_the_ragged_block_as_full_is_told_about_the_ragged_block(tmp_path):
    """Its public check said only 'block_q != block_k', and the report showed hint 1."""
    source = (REPO / "solutions" / "ex04_causal_tiles.py").read_text()
    old = "    last_row = min((i + 1) * block_q, nq) - 1"
    assert old in source, "the solution changed: update this test"
    (tmp_path / "ex04_causal_tiles.py").write_text(source.replace(old, "    last_row = (i + 1) * block_q - 1"))
    report = check("ex04_causal_tiles", exercises_dir=tmp_path, seed=3)
    result = report.graded[0][1]["causal_tile_skipped"]
    assert "ragged" in result["failure"]["why"], result["failure"]
    assert f"hint 2 of 3, for this check: {result['hints'][1]}" in str(report), str(report)


def test_cases_point_at_one_of_their_parts_hints_never_the_pseudocode():
    pointed = {}
    for name, exercise in EXERCISES.items():
        for index, part in enumerate(exercise.parts):
            rng = np.random.default_rng([7, index])
            for case in part.public(rng) + part.hidden(rng):
                if case.hint is not None:
                    assert 1 <= case.hint < len(part.hints), (name, part.function, case.label, case.hint)
                    pointed.setdefault((name, part.function), set()).add(case.hint)
    assert pointed[("ex02_softmax", "combine_states")] == {1, 2}
    assert {("ex02_softmax", "online_softmax"), ("ex04_causal_tiles", "causal_tile_skipped"),
            ("ex05_traffic", "fa2_forward_bytes"), ("ex08_kernel_causal", "flash_forward"),
            ("ex14_split_kv_decode", "split_kv_partials")} <= set(pointed)


def test_compare_reports_the_worst_element_and_its_index():
    rng = np.random.default_rng(5)
    ref = rng.standard_normal((5, 7))
    got = ref.copy()
    index = (int(rng.integers(5)), int(rng.integers(7)))
    got[index] += 0.5
    part = Part("f", "f", 1, None, None)
    failure = compare(part, got, ref)
    assert failure["kind"] == "value" and failure["index"] == index and abs(failure["max_error"] - 0.5) < 1e-12
    assert compare(part, got.astype(np.float32), ref)["kind"] == "dtype"
    assert compare(part, ref + 1e-12, ref) is None


def test_unknown_exercise_is_rejected_with_the_valid_ids(capsys):
    with pytest.raises(ValueError, match="ex99.*ex01_naive"):
        check("ex99")
    assert main(["ex99"]) == 2


def test_solutions_do_not_use_flashlab_and_stubs_name_their_exercise():
    for name, exercise in EXERCISES.items():
        solution = (REPO / "solutions" / f"{name}.py").read_text()
        stub = (REPO / "exercises" / f"{name}.py").read_text()
        assert "import flashlab" not in solution and "from flashlab" not in solution, name
        for part in exercise.parts:
            assert f"def {part.function}(" in solution or f"{part.function} = " in solution, (name, part.function)
            assert f"def {part.function}(" in stub or f"{part.function} = None" in stub, (name, part.function)
        if exercise.parts[0].kind not in ("choice", "number"):
            assert f'NotImplementedError("Exercise {name[2:4]}' in stub, name


def test_stubs_keep_the_solution_signatures_and_raise_naming_their_exercise():
    def functions(path: Path) -> dict:
        tree = ast.parse(path.read_text())
        return {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}

    for name, exercise in EXERCISES.items():
        stubs, solved = functions(REPO / "exercises" / f"{name}.py"), functions(REPO / "solutions" / f"{name}.py")
        assert set(stubs) == set(solved), (name, set(stubs) ^ set(solved))
        for fname, node in stubs.items():
            assert ast.unparse(node.args) == ast.unparse(solved[fname].args), (name, fname)
        for part in exercise.parts:
            if part.kind in ("choice", "number"):
                continue
            node = stubs[part.function]
            assert ast.get_docstring(node), f"{name}.{part.function} has no docstring"
            raises = [ast.unparse(n.exc) for n in ast.walk(node) if isinstance(n, ast.Raise)]
            assert any(r.startswith(f"NotImplementedError('Exercise {name[2:4]}:") for r in raises), (name, raises)


# Plausible mistakes, made by editing a solution: (exercise, what the mistake is, text, replacement,
# the part that must fail, failure kind). Each must fail on every seed tried; a part that uses the
# broken one (count_computed_tiles calls causal_tile_skipped) may fail with it.
MISTAKES = [
    ("ex04_causal_tiles", "count on a skip rule one off", "    return sum(not causal_tile_skipped(i, j, block_q, block_k, nq)",
     "    return sum(not (j * block_k >= min((i + 1) * block_q, nq) - 1)", "count_computed_tiles", "value"),
    ("ex01_naive", "softmax without the max subtraction", "p = np.exp(s - m)", "p = np.exp(s)", "naive_attention",
     "nan"),
    ("ex01_naive", "causal mask off by one", "[None, :] > np.arange(nq)[:, None]",
     "[None, :] > np.arange(nq)[:, None] + 1", "naive_attention", "value"),
    ("ex02_softmax", "combine without the -inf guard", "alpha = np.where(np.isneginf(m_a), 0.0, np.exp(m_a - m_safe))",
     "alpha = np.exp(m_a - m)", "combine_states", "nan"),
    ("ex03_tiled_forward", "acc not rescaled", "acc = alpha[..., None] * acc + p @", "acc = acc + p @",
     "tiled_attention", "value"),
    ("ex03_tiled_forward", "causal skip one tile late", "if causal and k0 > q1 - 1:", "if causal and k0 > q1:",
     "tiled_attention", "nan"),
    ("ex03_tiled_forward", "causal skip ignores the ragged last block", "if causal and k0 > q1 - 1:",
     "if causal and k0 > q0 + block_q - 1:", "tiled_attention", "nan"),
    ("ex04_causal_tiles", ">= instead of >", "return j * block_k > last_row", "return j * block_k >= last_row",
     "causal_tile_skipped", "value"),
    ("ex10_tiled_backward", "D from the tile instead of rowsum(dO * O)", "ds = p * (dp - D[..., q0:q1, None])",
     "ds = p * (dp - (p * dp).sum(-1, keepdims=True))", "tiled_attention_backward", "value"),
    ("ex10_tiled_backward", "no causal tile skipping", "if causal and k0 > q1 - 1:", "if False:",
     "tiled_attention_backward", "nan"),
    ("ex15_autograd_flash", "running max not carried", "m_new = torch.maximum(m_i, s.amax(-1))", "m_new = s.amax(-1)",
     "flash_forward_lse", "nan"),
    ("ex05_traffic", "causal skip one off", "if causal and k0 > q0 + rows - 1:", "if causal and k0 >= q0 + rows - 1:",
     "fa2_forward_bytes", "value"),
]


@pytest.mark.parametrize("exercise, mistake, old, new, part, kind", MISTAKES, ids=[m[1] for m in MISTAKES])
@pytest.mark.parametrize("seed", [3, 4])
def test_plausible_mistake_fails_its_exercise(tmp_path, exercise, mistake, old, new, part, kind, seed):
    source = (REPO / "solutions" / f"{exercise}.py").read_text()
    assert old in source, "the solution changed: update this mistake"
    (tmp_path / f"{exercise}.py").write_text(source.replace(old, new))
    report = check(exercise, exercises_dir=tmp_path, seed=seed)
    result = report.graded[0][1][part]
    assert result["status"] == "failed" and result["earned"] == 0 and not report.passed, result
    kinds = kind if isinstance(kind, tuple) else (kind,)
    assert result["failure"]["kind"] in kinds, result["failure"]
    kind = result["failure"]["kind"]


def test_public_only_never_counts_as_passed_and_html_says_so():
    report = check("ex04_causal_tiles", exercises_dir=REPO / "solutions", public_only=True, seed=3)
    assert {r["status"] for r in report.results} == {"public passed"} and report.score == 0 and not report.passed
    assert "hidden checks not yet run" in str(report) and "PART" in report._repr_html_()
    assert "public checks only (2 of 2 parts pass theirs)" in report._repr_html_()
    assert str(report).endswith('the points come from the hidden checks: check("ex04_causal_tiles")'), str(report)
    shell = type(report)(report.graded, shell=True)
    assert str(shell).endswith("the points come from the hidden checks: flashlab grade ex04_causal_tiles"), str(shell)


def test_public_only_exit_status_says_whether_the_public_checks_pass(tmp_path, capsys):
    assert main(["ex04_causal_tiles", "--solutions", "--public-only", "--seed", "3"]) == 0
    assert "public checks only" in capsys.readouterr().out
    source = (REPO / "solutions" / "ex04_causal_tiles.py").read_text()
    (tmp_path / "ex04_causal_tiles.py").write_text(source.replace("return j * block_k > last_row",
                                                                  "return j * block_k >= last_row"))
    assert main(["ex04_causal_tiles", "--exercises-dir", str(tmp_path), "--public-only", "--seed", "3"]) == 1
    assert main(["ex04_causal_tiles", "--exercises-dir", str(tmp_path / "missing"), "--public-only"]) == 2


@pytest.mark.parametrize("exercise, old, new, words", [
    ("ex03_tiled_forward", "acc = alpha[..., None] * acc + p @", "acc = acc + p @", "looks like acc is not rescaled"),
    ("ex01_naive", "[None, :] > np.arange(nq)[:, None]", "[None, :] >= np.arange(nq)[:, None]",
     "row 0 then sees no key"),
    ("ex14_split_kv_decode", "    scale = d ** -0.5 if scale is None else scale", "    scale = 1.0 if scale is None else scale",
     "not multiplied by scale"),
    ("ex14_split_kv_decode", "    o = acc / tl.where(l_i > 0, l_i, 1.0)  # an empty split: o = 0", "    o = acc",
     "o_part holds acc, not acc / l"),
    ("ex14_split_kv_decode", "m_i + tl.log(l_i))", "tl.log(l_i))", "without the running max"),
    ("ex12_triton_online_softmax", "l_i = l_i * tl.exp(m_i - m_ref) + ", "l_i = l_i + ", "l_i is not rescaled"),
    ("ex12_triton_online_softmax", "        p = tl.exp(x - m_i) / l_i", "        p = tl.exp(x - m_i)",
     "without the division"),
    ("ex12_triton_online_softmax", "mask=cols < n_cols, other=float(\"-inf\")).to(tl.float32)\n        m_new",
     "mask=cols < n_cols, other=0.0).to(tl.float32)\n        m_new", "loaded as 0, not -inf"),
    ("ex13_triton_backward", "        ds = p * (dp - delta[:, None])\n        dk +=", "        ds = p * dp\n        dk +=",
     "without the D_i term"),
    ("ex13_triton_backward", "dk += tl.dot(tl.trans(ds).to(q.dtype), q) * sm_scale",
     "dk += tl.dot(tl.trans(ds).to(q.dtype), q)", "dK is dS^T Q without the factor scale"),
    ("ex13_triton_backward", "        dv += tl.dot(tl.trans(p)", "        dv = tl.dot(tl.trans(p)", "overwritten"),
    ("ex07_kernel_inner_loop", "    o = acc / l_i[:, None]", "    o = acc", "without the division by l_i"),
    ("ex03_tiled_forward", "m_new = np.maximum(m_i, s.max(axis=-1))", "m_new = s.max(axis=-1)",
     "running max is not carried"),
    ("ex07_kernel_inner_loop", "m_new = tl.maximum(m_i, tl.max(qk, 1))", "m_new = tl.max(qk, 1)",
     "running max is not carried"),
    ("ex08_kernel_causal", "m_new = tl.maximum(m_i, tl.max(qk, 1))", "m_new = tl.max(qk, 1)",
     "running max is not carried"),
    ("ex12_triton_online_softmax", "m_new = tl.maximum(m_i, tl.max(x, 0))", "m_new = tl.max(x, 0)",
     "running max is not carried"),
    ("ex14_split_kv_decode", "m_new = tl.maximum(m_i, tl.max(s, 0))", "m_new = tl.max(s, 0)",
     "running max is not carried"),
    ("ex13_triton_backward", "keep = keep & (offs_n[None, :] <= offs_m[:, None])",
     "keep = keep & (offs_n[None, :] < offs_m[:, None])", "the causal mask hides the diagonal"),
    ("ex15_autograd_flash", "p = p.masked_fill(cols[None, :] > rows[:, None], 0.0)", "p = p",
     "backward recomputes P = exp(S - lse) without the causal mask"),
    ("ex03_tiled_forward", "    o = np.empty(q.shape[:-1] + (dv,), dtype=q.dtype)  # (..., Nq, dv)\n"
     "    for q0 in range(0, nq, block_q):", "    o = np.zeros(q.shape[:-1] + (dv,), dtype=q.dtype)\n"
     "    for q0 in range(0, nq - block_q + 1, block_q):", "the ragged last query block is never computed"),
    ("ex03_tiled_forward", "for k0 in range(0, nk, block_k):", "for k0 in range(0, nk - block_k + 1, block_k):",
     "the ragged last key block is never read"),
    ("ex02_softmax", "l = l * np.exp(m - m_new) + ", "l = l + ", "the running sum l_i is not rescaled"),
    ("ex02_softmax", "m = x.max(axis=-1, keepdims=True)", "m = x.max()", "one max is subtracted for the whole array"),
    ("ex01_naive", "m = s.max(axis=-1, keepdims=True)", "m = s.max()", "one max is subtracted for the whole array"),
    ("ex02_softmax", "m = x.max(axis=-1, keepdims=True)", "m = x.max(axis=0)", "the max is taken over the wrong axis"),
    ("ex02_softmax", "m_new = np.maximum(m, xc.max(axis=-1))", "m_new = np.maximum(m, xc.max())",
     "the chunk's max is not taken along each row"),
    ("ex09_backward_pieces", "    return p * (dp - D[..., None])", "    return p * (dp - dp.sum(axis=-1, keepdims=True))",
     "D is recomputed as rowsum(dP), without P"),
    ("ex03_tiled_forward", "if causal and k0 > q1 - 1:", "if causal and k0 + block_k > q1:",
     "the tile the diagonal crosses is never read"),
], ids=["no alpha rescale", "mask hides the diagonal", "partials unscaled", "partials unnormalised",
        "partial lse without max", "row sum not rescaled", "row not divided", "row padded with 0",
        "backward without D", "dK unscaled", "dV overwritten", "acc not divided", "tiled max not carried",
        "kernel max not carried", "causal kernel max not carried", "row max not carried", "split max not carried",
        "backward mask hides the diagonal", "backward P not masked", "ragged query block dropped",
        "ragged key block dropped", "online softmax sum not rescaled", "softmax global max", "attention global max",
        "softmax max over rows", "online max shared by the rows", "dS with D from dP", "diagonal tile dropped"])
def test_a_known_mistake_is_named_before_the_numbers(tmp_path, exercise, old, new, words):
    source = (REPO / "solutions" / f"{exercise}.py").read_text()
    assert old in source, "the solution changed: update this test"
    (tmp_path / f"{exercise}.py").write_text(source.replace(old, new))
    report = check(exercise, exercises_dir=tmp_path, seed=3)
    result = next((r for r in report.results if r["status"] == "failed"), report.results[0])  # the part it is in
    assert result["status"] == "failed" and result["failure"]["message"].startswith("looks like "), result["failure"]
    assert " are NaN in full" not in result["failure"]["message"], "the named mistake explains the NaN rows"
    assert words in result["failure"]["message"]
    assert "rounding-sized" not in result["failure"]["message"], "a wrong formula is not rounding"
    assert all(words not in line for line in result["failures"]), "a later check with the same mistake says so briefly"
    assert "word-break:normal" in report._repr_html_()  # JupyterLab would break its lines inside words
    hints = result["hints"]
    if hints:  # by default no written hint under a named mistake (it may be about something else); on request, yes
        assert hints[0] not in str(report) and "hint=1)" in str(report), str(report)
        assert hints[0] in str(report.next_hint())
        assert hints[0] in str(type(report)(report.graded, hint=1)), "hint=1 shows hint 1, as the docs say"


def test_float32_work_on_float64_inputs_is_called_rounding_not_a_formula(tmp_path):
    source = (REPO / "solutions" / "ex03_tiled_forward.py").read_text()
    old = "s = scale * (q_i @ np.swapaxes(k[..., k0:k1, :], -1, -2))"
    assert old in source, "the solution changed: update this test"
    (tmp_path / "ex03_tiled_forward.py").write_text(source.replace(old, old + ".astype(np.float32)"))  # scores in float32
    result = check("ex03_tiled_forward", exercises_dir=tmp_path, seed=3).results[0]
    assert result["status"] == "failed" and result["failure"]["kind"] == "value", result["failure"]
    assert "rounding-sized, not a wrong formula" in result["failure"]["message"], result["failure"]
    assert "float64 here" in result["failure"]["message"]
    rounding = [line for line in result["failures"] if "rounding-sized" in line]
    assert rounding and all(line.endswith("rounding-sized again") for line in rounding), result["failures"]


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_later_checks_that_the_first_named_mistake_explains_are_not_named_otherwise(tmp_path, seed):
    shutil.copy(BROKEN / "count_tiles_blocks_floored.py", tmp_path / "ex04_causal_tiles.py")
    result = check("ex04_causal_tiles", exercises_dir=tmp_path, seed=seed).results[1]  # count_computed_tiles
    assert "rounded down" in result["failure"]["message"], result["failure"]
    assert result["failures"] and not any("looks like" in line and "the same mistake" not in line
                                          for line in result["failures"]), result["failures"]


_ROWS, _COLS = "        rows = min(q0 + block_q, nq) - q0", "            cols = min(k0 + block_k, nk) - k0"
_SKIP = "if causal and k0 > q0 + rows - 1:"
TRAFFIC_VARIANTS = [  # (edits of exercise 05's solution, the named mistake's words or None: no name at all)
    ([(_ROWS, "        rows = block_q"), (_COLS, "            cols = block_k")],
     "looks like ragged last blocks were counted as full blocks"),
    ([(_ROWS, "        rows = block_q")], "looks like the ragged last query block was counted as a full block"),
    ([(_COLS, "            cols = block_k")], "looks like the ragged last key block was counted as a full block"),
    ([(_SKIP, "if causal and k0 > q0 + block_q - 1:")], "looks like the causal skip takes the ragged last query block"),
    ([(_SKIP, "if causal and k0 >= q0 + rows - 1:")], None),
    ([("rows * stat_itemsize", "rows * itemsize")], None),
    ([("            total += cols * (d + dv) * itemsize  # read K_j, V_j", "            total += 0"),
      ("    return total", "    return total + nk * (d + dv) * itemsize")], None),
]


@pytest.mark.parametrize("edits, words", TRAFFIC_VARIANTS, ids=["both ragged blocks full", "ragged query block full",
                                                                "ragged key block full", "skip takes the block as full",
                                                                "skip one off", "lse at itemsize", "K and V read once"])
def test_traffic_names_ragged_blocks_counted_as_full_and_nothing_else(tmp_path, edits, words):
    """Exercise 05 counted the ragged last blocks as full and said only 'returned 37376, expected
    32656'; the other wrong counts here must not be given that name (nor any other)."""
    text = (REPO / "solutions" / "ex05_traffic.py").read_text()
    for old, new in edits:
        assert old in text, "the solution changed: update this test"
        text = text.replace(old, new)
    (tmp_path / "ex05_traffic.py").write_text(text)
    report = check("ex05_traffic", exercises_dir=tmp_path, seed=3)
    result = report.results[0]
    assert result["status"] == "failed", str(report)
    if words is None:
        assert "looks like" not in str(report), str(report)
    else:
        assert result["failure"]["message"].startswith(words), result["failure"]
        assert ", expected " in result["failure"]["message"], "the numbers still follow the name"


def _grade_module(tmp_path, module: str, exercise: str, seed: int):
    folder = tmp_path / f"seed{seed}"
    folder.mkdir()
    shutil.copy(BROKEN / f"{module}.py", folder / f"{exercise}.py")
    return check(exercise, exercises_dir=folder, seed=seed)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_a_combine_without_the_max_fails_a_large_lse_check_by_name(tmp_path, seed):
    """combine_splits with weights exp(lse_s) / sum exp(lse_s) scored 2/2: every combine case had lse near 0.
    A hidden check with lse near 1000 (and near 100) now makes exp() overflow, and the report names the
    mistake; a row whose every split is empty must give 0, not NaN."""
    report = _grade_module(tmp_path, "combine_without_max", "ex14_split_kv_decode", seed)
    failure = report.graded[0][1]["combine_splits"]["failure"]
    assert "lse + 1000" in failure["case"] and failure["group"] == "hidden", failure
    assert failure["message"].startswith("looks like the splits are combined without subtracting the largest lse "
                                         "first"), failure
    assert "the largest lse subtracted first" in failure["why"], failure


def test_combine_checks_hold_large_lse_and_a_row_with_no_key():
    from flashlab.grading.cases import combine_splits_hidden, combine_splits_reference

    cases = combine_splits_hidden(np.random.default_rng(0))
    lse = [c.kwargs["lse_part"] for c in cases]
    assert any(np.isfinite(x).all() and x.max() > 709 for x in lse), "an lse past float64's exp() overflow"
    empty = [c for c, x in zip(cases, lse) if np.isneginf(x).all(axis=-1).any()]
    assert len(empty) == 1
    o = combine_splits_reference(**empty[0].kwargs)
    assert not np.isnan(o).any() and (o[np.isneginf(empty[0].kwargs["lse_part"]).all(axis=-1)] == 0).all()


def test_a_combine_without_the_empty_row_guard_fails_the_row_with_no_key(tmp_path):
    source = (REPO / "solutions" / "ex14_split_kv_decode.py").read_text()
    guard = "    lse = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)  # that row: every weight 0, o = 0\n"
    assert guard in source, "the solution changed: update this test"
    (tmp_path / "ex14_split_kv_decode.py").write_text(source.replace(guard, ""))
    result = check("ex14_split_kv_decode", exercises_dir=tmp_path, seed=3).graded[0][1]["combine_splits"]
    assert result["status"] == "failed" and result["failure"]["kind"] == "nan", result["failure"]
    assert "has no key" in result["failure"]["case"] and "looks like" not in result["failure"]["message"]


@pytest.mark.parametrize("module, words", [
    ("count_tiles_unclipped_last_row", "not clipped to nq"), ("count_tiles_skip_one_off", "one off (>= for >)")])
@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_a_tile_count_on_a_wrong_skip_rule_names_the_rule(tmp_path, module, words, seed):
    """A count whose last row was not clipped to nq was told only the case's why ('a key block that
    starts at a query block's last row is computed'), which is about another mistake. The count is now
    compared with what the typical wrong rules give, the one it matches is named, with the pointer to
    causal_tile_skipped, and each case's why says what is true of that case."""
    report = _grade_module(tmp_path, module, "ex04_causal_tiles", seed)
    results = report.graded[0][1]
    assert results["causal_tile_skipped"]["status"] == "passed"
    failure = results["count_computed_tiles"]["failure"]
    assert failure["message"].startswith("looks like the skip rule") and words in failure["message"], failure
    assert "builds on causal_tile_skipped" in failure["message"], failure
    if module == "count_tiles_unclipped_last_row":
        assert "the last query block is ragged" in failure["why"], failure
    else:
        assert "starts at query block" in failure["why"], failure


def test_tile_count_mistakes_give_their_rules_count_and_never_the_right_one():
    from flashlab.grading.cases import count_tiles_reference
    from flashlab.grading.mistakes import COUNT_BLOCKS_FLOORED, COUNT_BOTH, COUNT_ONE_OFF, COUNT_UNCLIPPED, MISTAKES

    def rule_count(nq, nk, bq, bk, unclipped, inclusive):
        count = 0
        for i in range(-(-nq // bq)):
            last = (i + 1) * bq - 1 if unclipped else min((i + 1) * bq, nq) - 1
            count += sum((j * bk >= last) if inclusive else (j * bk > last) for j in range(-(-nk // bk)))
        return -(-nq // bq) * -(-nk // bk) - count

    rules = {COUNT_UNCLIPPED: (True, False), COUNT_ONE_OFF: (False, True), COUNT_BOTH: (True, True)}
    detectors = dict(MISTAKES[("ex04_causal_tiles", "count_computed_tiles")])
    floored = detectors.pop(COUNT_BLOCKS_FLOORED)  # not a skip rule: the blocks counted rounded down
    assert set(detectors) == set(rules)
    rng = np.random.default_rng(7)
    named = set()
    for _ in range(400):
        kw = dict(nq=int(rng.integers(1, 120)), nk=int(rng.integers(1, 120)), block_q=int(rng.integers(1, 20)),
                  block_k=int(rng.integers(1, 20)), causal=bool(rng.integers(4)))
        right = count_tiles_reference(**kw)
        assert floored(kw, {}) != right, kw
        hits = {d: f(kw, {}) for d, f in detectors.items() if f(kw, {}) is not None}
        assert right not in hits.values(), kw
        assert len(set(hits.values())) == len(hits), ("one count, one name", kw, hits)
        for description, count in hits.items():
            assert count == rule_count(kw["nq"], kw["nk"], kw["block_q"], kw["block_k"], *rules[description])
        named |= set(hits)
    assert named == set(detectors), "every rule is named somewhere"


QUIZ_WRONG = [  # (question, a typical wrong answer, words of its name, or None: no name, the question's why only)
    ("Q1", "a", "the FLOPs were taken for the saving"), ("Q1", "(c)", "on-chip SRAM was taken for the saving"),
    ("Q2", "d", "S is never written to HBM"), ("Q3", "b", "the running max was taken for an estimate"),
    ("Q4", "a", "decode was taken for compute-bound"),
    ("Q5", 32.87, "K and V were counted as read once"), ("Q5", 0.5, "the ratio is upside down"),
    ("Q5", 1.307, "FlashAttention-1's loop order"), ("Q5", 7.0, None),
    ("Q6", 0.985, "a full query block of 128 rows"), ("Q6", 2.0, "the prefill ratio of Q5"), ("Q6", 3.0, None),
]


def test_a_wrong_quiz_answer_is_told_what_it_counted_never_the_answer(tmp_path):
    """The quiz said only '32.9 is not within 1% of the answer' and 'compare with the exercise's
    docstring'. Each question now says what it asks and what a typical wrong answer counted, and a
    wrong answer that matches a known mistake is named; no feedback holds the right answer."""
    from flashlab.grading.registry import answer_hash

    by_question: dict = {}
    for question, answer, words in QUIZ_WRONG:
        by_question.setdefault(question, []).append((answer, words))
    quiz = EXERCISES["ex11_quiz"]
    for r in range(max(len(v) for v in by_question.values())):  # one answer per question in each file
        folder = tmp_path / f"round{r}"
        folder.mkdir()
        asked = {q: v[r] for q, v in by_question.items() if r < len(v)}
        folder.joinpath("ex11_quiz.py").write_text("".join(f"{q} = {a!r}\n" for q, (a, _) in asked.items()))
        report = check("ex11_quiz", exercises_dir=folder, seed=1)
        results = report.graded[0][1]
        for question, (answer, words) in asked.items():
            failure = results[question]["failure"]
            assert results[question]["status"] == "failed", (question, answer)
            assert failure["why"] and "docstring" not in str(report), failure
            assert failure["message"].startswith("looks like ") == (words is not None), (question, answer, failure)
            if words:
                assert words in failure["message"], failure
            part = next(p for p in quiz.parts if p.function == question)
            right = part.reference()
            if part.kind == "number":  # no feedback or name states the answer
                assert not any(f"{right:.{n}f}" in failure["message"] + failure["why"] for n in (2, 3)), failure
            else:
                letter = next(c for c in "abcd" if answer_hash(question, c) == right)
                assert f"({letter})" not in failure["message"] + failure["why"], failure


def test_quiz_mistakes_never_match_the_right_answer():
    from flashlab.grading.checks import compare
    from flashlab.grading.mistakes import MISTAKES

    for part in EXERCISES["ex11_quiz"].parts:
        detectors = MISTAKES[("ex11_quiz", part.function)]
        assert detectors, part.function
        right = part.reference()
        for description, detector in detectors:
            wrong = detector({}, {})
            if part.kind == "number":
                assert compare(part, wrong, right) is not None, (part.function, description, wrong, right)
            else:
                assert wrong != right, (part.function, description)


def test_honest_traffic_counts_are_never_named_as_a_mistake():
    from flashlab.grading.cases import fa2_bytes_reference
    from flashlab.grading.mistakes import MISTAKES

    rng = np.random.default_rng(5)
    for _ in range(200):
        kw = dict(nq=int(rng.integers(1, 300)), nk=int(rng.integers(1, 300)), d=int(rng.choice([16, 64])),
                  dv=int(rng.choice([16, 40])), block_q=int(rng.choice([16, 32, 64])),
                  block_k=int(rng.choice([16, 32])), causal=bool(rng.integers(2)), itemsize=2, stat_itemsize=4)
        for description, detector in MISTAKES[("ex05_traffic", "fa2_forward_bytes")]:
            assert detector(kw, {}) != fa2_bytes_reference(**kw), (description, kw)


@pytest.mark.parametrize("exercise, old, new", [
    ("ex02_softmax", "m = x.max(axis=-1, keepdims=True)", "m = x.max()"),
    ("ex01_naive", "m = s.max(axis=-1, keepdims=True)", "m = s.max()"),
    ("ex02_softmax", "e = np.exp(x - m)", "e = np.exp(x)"),
    ("ex01_naive", "p = np.exp(s - m)", "p = np.exp(s)"),
], ids=["softmax global max", "attention global max", "softmax max never subtracted", "attention max never subtracted"])
def test_a_softmax_with_one_max_for_every_row_is_told_underflow_not_overflow(tmp_path, exercise, old, new):
    """A softmax that subtracted x.max() over the whole array was told only that 'scores near 1e3 overflow
    exp()': what goes wrong is underflow, rows far below the global max giving 0/0. The large-logits check
    says both, and the global max is named; a max never subtracted is not given that name."""
    source = (REPO / "solutions" / f"{exercise}.py").read_text()
    assert old in source, "the solution changed: update this test"
    (tmp_path / f"{exercise}.py").write_text(source.replace(old, new))
    report = check(exercise, exercises_dir=tmp_path, seed=3)
    failure = report.results[0]["failure"]
    assert "large logits" in failure["case"], failure
    assert "underflows to 0" in failure["why"] and "one max for the whole array" in failure["why"], failure
    named = failure["message"].startswith("looks like one max is subtracted for the whole array")
    assert named == new.endswith(".max()"), failure


def test_an_error_inside_the_kernel_shows_the_learners_line(tmp_path):
    source = (REPO / "solutions" / "ex06_triton_primer.py").read_text()
    old = "    tl.store(Out + offs, x + y, mask=mask)"
    assert old in source, "the solution changed: update this test"
    source = source.replace(old, "    tl.store(Out + offs, x + y + undefined_name, mask=mask)")
    (tmp_path / "ex06_triton_primer.py").write_text(source)
    line = source.splitlines().index("    tl.store(Out + offs, x + y + undefined_name, mask=mask)") + 1
    report = check("ex06_triton_primer", exercises_dir=tmp_path, seed=3, public_only=True)
    failure = report.results[0]["failure"]
    assert failure["kind"] == "exception" and f"ex06_triton_primer.py:{line}:" in failure["where"], failure
    assert "undefined_name" in str(report) and "site-packages" not in failure["traceback"], failure["traceback"]


def test_a_compile_error_raised_at_the_launch_points_at_the_kernel_line():
    """On a GPU, Triton compiles the kernel at its launch and raises a CompilationError whose line
    counts from the kernel's def; the grader turns it into the line of the learner's file."""
    import ast
    import linecache

    from triton.compiler.errors import CompilationError

    from flashlab.grading.child import _learner_frame

    path = "/tmp/learner_exercise_for_compile_error.py"
    lines = ["import triton", "", "@triton.jit", "def other(X):", "    pass", "", "", "@triton.jit",
             "def add_kernel(X, Out):", "    x = tl.load(X)", "    tl.store(Out, x + undefined_name)", "",
             "def add(x):", "    add_kernel[(1,)](x, x)"]
    linecache.cache[path] = (1, None, [line + "\n" for line in lines], path)
    src = "\n".join(lines[8:11]) + "\n"
    node = ast.parse("x + undefined_name").body[0].value
    node.lineno, node.col_offset = 3, 20  # the third line of the kernel's source
    try:
        try:
            raise CompilationError(src, node, "NameError('undefined_name is not defined')")
        except CompilationError as inner:
            raise RuntimeError("at the launch") from inner
    except RuntimeError as exc:
        where = _learner_frame(exc, {path})
    assert where == (path, 11, "tl.store(Out, x + undefined_name)"), where
    linecache.cache.pop(path)


def test_a_graded_file_sees_none_of_the_graders_tokens_and_grading_leaves_bytecode_writing_alone(tmp_path, monkeypatch):
    """An instructor's environment may hold tokens; a submission's error message reaches its
    author. The child gets only what Python, CUDA, Triton and torch read, and flashlab's settings."""
    from flashlab.grading.sandbox import child_environment

    monkeypatch.setenv("INSTRUCTOR_API_TOKEN", "tok-7f3a91")
    monkeypatch.setenv("FLASHLAB_TARGET_NOTE", "kept")
    env = child_environment(dict(os.environ, FLASHLAB_GRADER_MEMORY_LIMIT="1"))
    assert "INSTRUCTOR_API_TOKEN" not in env and "FLASHLAB_GRADER_MEMORY_LIMIT" not in env
    assert env["FLASHLAB_TARGET_NOTE"] == "kept" and env["PATH"] == os.environ["PATH"]
    shutil.copy(BROKEN / "reads_grader_environment.py", tmp_path / "ex01_naive.py")
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    report = check("ex01_naive", exercises_dir=tmp_path, seed=3, public_only=True)
    result = report.graded[0][1]["naive_attention"]
    assert result["status"] == "failed" and result["earned"] == 0, result
    text = str(report)
    assert "leaked: {}" in text and "tok-7f3a91" not in text, text
    assert sys.dont_write_bytecode is False  # grading turned it on only while it ran


def test_also_failed_lines_keep_whole_clauses():
    from flashlab.grading.checks import clip_message

    message = ("looks like acc is not rescaled by alpha when a later key block raises the row max. output: "
               "max abs error 0.739 (allowed 2e-05 + 0.0002*|expected|, dtype float32); worst at index (29, 6): "
               "got 0.803776, expected 0.403673; 128 of 256 elements out of tolerance")
    clipped = clip_message(message, limit=200)
    assert clipped == message[:message.index("; worst")] + " ..."
    assert clip_message("short message") == "short message"
    assert clip_message("y" * 300, limit=100) == "y" * 100 + " ..."


KERNEL_MISTAKES = [  # (exercise, edits of its solution, words the report must contain)
    ("ex08_kernel_causal", [('        if CAUSAL:\n            qk = tl.where(offs_n[None, :] <= offs_m[:, None], qk, '
                             'float("-inf"))\n', "")], "the blocks it visits are not masked"),
    ("ex07_kernel_inner_loop", [("qk = tl.dot(q, kt) * qk_scale", "qk = tl.dot(q, kt) * (qk_scale * 1.4426950408889634)")],
     "exp() with log2(e) = 1.4427 folded into the scale"),
    ("ex07_kernel_inner_loop", [("tl.exp(", "tl.exp2(")], "exp2() but the scale is not multiplied by log2(e)"),
    ("ex07_kernel_inner_loop", [("acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)",
                                 "acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)\n        acc = acc / l_i[:, None]"),
                                ("o = acc / l_i[:, None]", "o = acc")], "acc is divided by l_i inside the key loop"),
]


@pytest.mark.parametrize("exercise, edits, words", KERNEL_MISTAKES, ids=[w[:24] for _, _, w in KERNEL_MISTAKES])
def test_a_kernel_with_a_typical_mistake_gets_it_named(tmp_path, exercise, edits, words):
    text = (REPO / "solutions" / f"{exercise}.py").read_text()
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new)
    (tmp_path / f"{exercise}.py").write_text(text)
    report = check(exercise, exercises_dir=tmp_path, seed=5, public_only=True)
    result = report.results[0]
    assert result["status"] == "failed" and words in result["failure"]["message"], result["failure"]


OUT_OF_BOUNDS = [  # (exercise, a masked load or store of its solution, the same unmasked, the parameter named)
    ("ex07_kernel_inner_loop", "q = tl.load(q_ptrs, mask=offs_m[:, None] < N_Q, other=0.0)", "q = tl.load(q_ptrs)",
     "tl.load", "Q"),
    ("ex07_kernel_inner_loop", "tl.store(o_ptrs, o.to(Out.dtype.element_ty), mask=offs_m[:, None] < N_Q)",
     "tl.store(o_ptrs, o.to(Out.dtype.element_ty))", "tl.store", "Out"),
    ("ex13_triton_backward", "tl.store(dQ + q_off, dq.to(dQ.dtype.element_ty), mask=row_ok[:, None])",
     "tl.store(dQ + q_off, dq.to(dQ.dtype.element_ty))", "tl.store", "dQ"),
]


@pytest.mark.skipif(has_gpu_driver(), reason="the interpreter's check: compiled kernels are not checked on a GPU")
@pytest.mark.parametrize("exercise, old, new, what, name", OUT_OF_BOUNDS, ids=[f"{e[:4]} {w} {n}" for e, _, _, w, n in OUT_OF_BOUNDS])
def test_a_load_or_store_outside_the_tensors_fails_naming_the_tensor_and_line(tmp_path, exercise, old, new, what, name):
    """Rows a missing mask reads past the end may never reach a returned value (an unmasked Q load
    whose extra rows are not stored), and a store past the end may corrupt nothing the grader reads:
    under the interpreter every access is checked against the launch's tensors."""
    text = (REPO / "solutions" / f"{exercise}.py").read_text()
    assert old in text, "the solution changed: update this test"
    (tmp_path / f"{exercise}.py").write_text(text.replace(old, new))
    line = text.replace(old, new).splitlines().index(next(x for x in text.replace(old, new).splitlines() if new in x)) + 1
    report = check(exercise, exercises_dir=tmp_path, seed=3)
    failures = [r["failure"] for r in report.results if r["status"] == "failed"]
    assert failures and not report.passed, str(report)
    failure = failures[0]
    assert failure["kind"] == "exception" and f"{exercise}.py:{line}:" in failure["where"], failure
    assert f"OutOfBounds: a {what} reached memory outside every tensor" in failure["message"], failure["message"]
    assert f"past the end of {name} (shape" in failure["message"], failure["message"]
    assert all("the same error at the same line" in line for line in report.results[0]["failures"]), report.results[0]
    assert str(report).count("OutOfBounds: a ") == 1, "the error is the problem line; the traceback stops above it"


@pytest.mark.skipif(not has_gpu_driver(), reason="the GPU's check of stores; the interpreter's is the test above")
@pytest.mark.parametrize("exercise, old, new, what, name", [o for o in OUT_OF_BOUNDS if o[3] == "tl.store"],
                         ids=[f"{e[:4]} {n}" for e, _, _, w, n in OUT_OF_BOUNDS if w == "tl.store"])
def test_on_a_gpu_a_store_past_the_end_fails_naming_the_tensor(tmp_path, exercise, old, new, what, name):
    """Compiled kernels are not checked access by access; the launch runs on copies of its tensors
    between guard bands, and a store that lands in one fails on every run."""
    text = (REPO / "solutions" / f"{exercise}.py").read_text()
    assert old in text, "the solution changed: update this test"
    (tmp_path / f"{exercise}.py").write_text(text.replace(old, new))
    report = check(exercise, exercises_dir=tmp_path, seed=3)
    messages = [r["failure"]["message"] for r in report.results if r["status"] == "failed"]
    assert messages and not report.passed, str(report)
    assert any("OutOfBounds: a tl.store wrote outside every tensor" in m and f"past the end of {name} (shape" in m
               for m in messages), messages


ROWS_NAMED = "looks like x's rows are read n_cols apart (the row length), not x.stride(0) apart"
ROW_KERNEL_MISTAKES = [  # (exercise, text of its solution, the mistake, words of the failing check's report)
    ("ex12_triton_online_softmax", "X + row * stride_xm", "X + row * n_cols", ROWS_NAMED),
    ("ex12_triton_online_softmax", "Out + row * stride_om", "Out + row * stride_xm", "x.stride(0) = "),
    ("ex06_triton_primer", "X + row * stride_xm", "X + row * n_cols", ROWS_NAMED),
    ("ex12_triton_online_softmax", '        raise ValueError(f"block_n={block_n} must be a power of two >= 16")\n',
     "        pass\n", "expected ValueError whose message names block_n"),
    ("ex12_triton_online_softmax", 'raise ValueError(f"block_n={block_n} must be a power of two >= 16")',
     'raise ValueError("bad block size")', "it raised ValueError: bad block size"),
]


@pytest.mark.parametrize("exercise, old, new, words", ROW_KERNEL_MISTAKES,
                         ids=["x rows by n_cols", "out rows by x's stride", "primer rows by n_cols", "no ValueError",
                              "ValueError without the name"])
def test_strided_rows_and_a_refused_block_n_are_graded(tmp_path, exercise, old, new, words):
    """A row kernel must step by the strides it is given (the grader hands it a column slice of a
    wider array), and exercise 12 must refuse a bad block_n naming it."""
    text = (REPO / "solutions" / f"{exercise}.py").read_text()
    assert old in text, "the solution changed: update this test"
    (tmp_path / f"{exercise}.py").write_text(text.replace(old, new))
    report = check(exercise, exercises_dir=tmp_path, seed=3)
    failed = [r for r in report.results if r["status"] == "failed"]
    assert len(failed) == 1 and not report.passed, str(report)
    failure = failed[0]["failure"]
    assert words in failure["case"] + failure["message"], failure


@pytest.mark.parametrize("exercise, old, new", [
    ("ex12_triton_online_softmax", "online_softmax_kernel[(m,)]", "online_softmax_kernel[(1,)]"),
    ("ex06_triton_primer", "softmax_kernel[(m,)]", "softmax_kernel[(1,)]"),
])
def test_rows_never_written_are_not_named_as_rows_read_by_their_length(tmp_path, exercise, old, new):
    """One program for the first row only: every later row is left as allocated (NaN, from the
    grader's poison), where rows read by their length give wrong values further down the case."""
    text = (REPO / "solutions" / f"{exercise}.py").read_text()
    assert old in text, "the solution changed: update this test"
    (tmp_path / f"{exercise}.py").write_text(text.replace(old, new))
    report = check(exercise, exercises_dir=tmp_path, seed=3)
    assert not report.passed and "rows are read n_cols apart" not in str(report), str(report)


def test_every_public_case_says_what_it_checks(tmp_path):
    from flashlab.grading.cases import PUBLIC_WHY
    from flashlab.grading.checks import PUBLIC_SEED

    for name, exercise in EXERCISES.items():
        for index, part in enumerate(exercise.parts):
            if part.kind in ("choice", "number"):
                continue
            public = part.public(np.random.default_rng([PUBLIC_SEED, index]))
            whys = PUBLIC_WHY.get((name, part.function), ())
            assert len(whys) == len(public) or all(c.why for c in public), (name, part.function, len(whys), len(public))
    source = (REPO / "solutions" / "ex04_causal_tiles.py").read_text()
    (tmp_path / "ex04_causal_tiles.py").write_text(source.replace("return j * block_k > last_row",
                                                                  "return j * block_k >= last_row"))
    report = check("ex04_causal_tiles", exercises_dir=tmp_path, seed=3)
    assert "this check (public, the same on every run): block_q != block_k, a tile that the diagonal crosses" in str(
        report), str(report)


@pytest.mark.skipif(has_gpu_driver(), reason="NumPy's warnings come from Triton's CPU interpreter")
def test_numpy_warnings_from_inside_the_interpreter_are_not_reported_as_printed(tmp_path):
    source = (REPO / "solutions" / "ex06_triton_primer.py").read_text()
    old = 'other=float("-inf")).to(tl.float32)'
    assert old in source, "the solution changed: update this test"
    (tmp_path / "ex06_triton_primer.py").write_text(source.replace(old, old + ' * float("inf")'))  # inf - inf: NaN
    report = check("ex06_triton_primer", exercises_dir=tmp_path, seed=3, public_only=True)
    failure = report.results[1]["failure"]
    assert failure["kind"] == "nan" and not failure["output"], failure
    assert "RuntimeWarning" not in str(report) and "printed:" not in str(report), str(report)


def test_memory_bounds_accepts_every_byte_of_a_view_and_names_the_nearest_tensor():
    import torch

    from flashlab.grading.bounds import MemoryBounds, OutOfBounds

    frame = torch.full((100,), float("nan"))
    x = frame[10:22].view(3, 4)  # inside a larger buffer, as the grader's inputs are
    y = torch.zeros(5, dtype=torch.float16)
    bounds = MemoryBounds()
    bounds.set([("X", x), ("Y", y)])
    inside = np.array([x.data_ptr() + 4 * i for i in range(12)] + [y.data_ptr() + 2 * i for i in range(5)], np.uint64)
    bounds.check("tl.load", inside)
    past = np.array([x.data_ptr() + 4 * 12], np.uint64)
    with pytest.raises(OutOfBounds, match=r"1 lane, up to 1 element past the end of X \(shape \(3, 4\)\)"):
        bounds.check("tl.load", past)
    rows = np.array([x.data_ptr() + 4 * i for i in range(8, 20)], np.uint64)  # the last row and two past the end
    with pytest.raises(OutOfBounds, match=r"8 lanes, up to 8 elements past the end of X"):
        bounds.check("tl.load", rows)
    bounds.check("tl.load", past, np.array([False]))  # masked off: not read
    with pytest.raises(OutOfBounds, match="up to 3 elements before the start of X"):
        bounds.check("tl.store", np.array([x.data_ptr() - 12], np.uint64))
    bounds.set([])
    bounds.check("tl.load", past)  # no launch running: nothing to check


NOT_THE_RUNNING_MAX = [  # (exercise, edits of its solution): other mistakes that end in NaN, never named as it
    ("ex07_kernel_inner_loop", [("m_new = tl.maximum(m_i, tl.max(qk, 1))", "m_new = tl.zeros([BLOCK_M], dtype=tl.float32)")]),
    ("ex12_triton_online_softmax", [("m_new = tl.maximum(m_i, tl.max(x, 0))", "m_new = tl.full([], 0.0, tl.float32)"),
                                    ("p = tl.exp(x - m_i) / l_i", "p = tl.exp(x) / l_i")]),
    ("ex08_kernel_causal", [("BLOCK_M = 16  # query rows per program", "BLOCK_M = 32  # query rows per program"),
                            ("    for start_n in range(0, hi, BLOCK_N):\n",
                             "    n_blocks = tl.cdiv(hi, BLOCK_N)\n    for jj in range(0, n_blocks):\n"
                             "        start_n = (n_blocks - 1 - jj) * BLOCK_N\n")]),
]


@pytest.mark.parametrize("exercise, edits", NOT_THE_RUNNING_MAX, ids=["max never subtracted", "row max never subtracted",
                                                                     "key blocks in reverse"])
def test_a_mistake_that_ends_in_nan_is_not_named_as_a_running_max_not_carried(tmp_path, exercise, edits):
    """Found by a red-team pass: the detector's output was all NaN on some cases, and any all-NaN output
    matched it. It now names the mistake only where an exp(m_old - m_new) overflows, and the cases
    that show it leave every other row finite."""
    text = (REPO / "solutions" / f"{exercise}.py").read_text()
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new)
    (tmp_path / f"{exercise}.py").write_text(text)
    for seed in (1, 2):
        report = check(exercise, exercises_dir=tmp_path, seed=seed)
        assert not report.passed, str(report)
        assert "running max is not carried" not in str(report), str(report)


SKIPPED_DIAGONAL = ("tl.minimum((start_m + 1) * BLOCK_M, N_Q)", "tl.minimum(start_m * BLOCK_M, N_Q)")
TILE_DS = "ds = p * (dp - D[..., q0:q1, None])"
NAMED_BACKWARD_AND_CAUSAL = [  # (exercise, edits of its solution, words of the name every failing check gets)
    # a one-row case cannot tell a flipped mask from no mask in the visited blocks: either name is right there
    ("ex08_kernel_causal", [SKIPPED_DIAGONAL], "the causal key loop stops one block early"),
    ("ex08_kernel_causal", [("tl.minimum((start_m + 1) * BLOCK_M, N_Q))",
                             "tl.minimum((start_m + 1) * BLOCK_M, N_Q)) - BLOCK_N")],
     "the causal key loop stops one block early"),
    ("ex08_kernel_causal", [("hi = tl.minimum(N_K, tl.minimum((start_m + 1) * BLOCK_M, N_Q))",
                             "hi = start_m * BLOCK_M"),
                            ("BLOCK_N = 16  #", "BLOCK_N = 32  #")], "the causal key loop stops one block early"),
    ("ex08_kernel_causal", [("qk = tl.where(offs_n[None, :] <= offs_m[:, None]", "qk = tl.where(offs_n[None, :] >= "
                             "offs_m[:, None]")], "the causal mask is on the wrong side"),
    ("ex09_backward_pieces", [("p * (dp - D[..., None])", "p * dp - D[..., None]")], "the brackets are missing"),
    ("ex09_backward_pieces", [("p * (dp - D[..., None])", "dp - D[..., None]")], "dP - D without the factor P"),
    ("ex09_backward_pieces", [("p * (dp - D[..., None])", "p * (D[..., None] - dp)")], "dS has the wrong sign"),
    ("ex10_tiled_backward", [(TILE_DS, "ds = p * (dp - (p * dp).sum(-1, keepdims=True))")],
     "D must come from the whole row"),
    ("ex10_tiled_backward", [(TILE_DS, "ds = p * (dp - (do_i * (p @ v_j)).sum(-1, keepdims=True))")],
     "D must come from the whole row"),
    ("ex10_tiled_backward", [(TILE_DS, "ds = p * dp")], "without the D_i term"),
    ("ex10_tiled_backward", [("dq[..., q0:q1, :] += scale * (ds @ k_j)", "dq[..., q0:q1, :] += ds @ k_j")],
     "dQ is dS K without the factor scale"),
    ("ex10_tiled_backward", [("dk_j += scale * (np.swapaxes(ds, -1, -2) @ q_i)",
                              "dk_j += np.swapaxes(ds, -1, -2) @ q_i")],
     "dK is dS^T Q without the factor scale"),
    ("ex10_tiled_backward", [("dq[..., q0:q1, :] += scale", "dq[..., q0:q1, :] = scale")], "overwritten"),
    ("ex10_tiled_backward", [("dv_j += np.swapaxes(p, -1, -2) @ do_i", "dv_j = np.swapaxes(p, -1, -2) @ do_i")],
     "overwritten"),
    ("ex10_tiled_backward", [("[None, :] > np.arange(q0, q1)[:, None]", "[None, :] >= np.arange(q0, q1)[:, None]")],
     "the causal mask hides the diagonal"),
    ("ex10_tiled_backward", [("s = scale * (q_i @ np.swapaxes(k_j, -1, -2))", "s = q_i @ np.swapaxes(k_j, -1, -2)")],
     "P is recomputed from scores without the scale"),
    # a causal row whose keys in a diagonal tile are all masked is 0/0 there: the NaN it spreads is part of the name
    ("ex10_tiled_backward", [("p = np.exp(s - lse[..., q0:q1, None])",
                              "p = np.exp(s - s.max(-1, keepdims=True)); p = p / p.sum(-1, keepdims=True)")],
     "P is recomputed as each key tile's own softmax"),
    ("ex10_tiled_backward", [("D = (do * o).sum(axis=-1)", "D = do.sum(axis=-1)")], "D is rowsum(dO) without the factor O"),
]


def _edited_report(tmp_path, exercise, edits, seed):
    text = (REPO / "solutions" / f"{exercise}.py").read_text()
    for old, new in edits:
        assert old in text, "the solution changed: update this test"
        text = text.replace(old, new)
    (tmp_path / f"{exercise}.py").write_text(text)
    return check(exercise, exercises_dir=tmp_path, seed=seed)


@pytest.mark.parametrize("exercise, edits, words", NAMED_BACKWARD_AND_CAUSAL,
                         ids=[f"{e[:4]} {w[:28]} {i}" for i, (e, _, w) in enumerate(NAMED_BACKWARD_AND_CAUSAL)])
def test_a_causal_kernel_or_backward_mistake_is_named_on_every_check_it_fails(tmp_path, exercise, edits, words):
    """One line of the solution changed: the first failing check names the mistake before the numbers
    (the NaN rows of a loop that skips the diagonal block too), and every later one is the same mistake
    (but a case of one query block, whose output the mistake makes all NaN: that names nothing). Exercise
    10's NumPy backward is graded with one hidden seed (10-20 s a grading on 2 cores), the kernels with two."""
    for seed in (3,) if exercise.startswith("ex10") else (3, 4):
        report = _edited_report(tmp_path, exercise, edits, seed)
        result = next(r for r in report.results if r["status"] == "failed")
        message = result["failure"]["message"]
        assert message.startswith("looks like ") and words in message, result["failure"]
        assert " are NaN in full" not in message, "the named mistake explains the NaN rows"
        assert all(line.endswith("looks like the same mistake")
                   or re.search(r"NaN at index .* \((\d+) of \1 elements", line)
                   or "Nq=1 " in line and "the blocks it visits are not masked" in line
                   for line in result["failures"]), result["failures"]  # an all-NaN output names nothing
        assert [r for r in report.results if r["status"] == "failed"] == [result], str(report)


def test_a_loop_that_skips_the_diagonal_block_gives_nan_in_the_first_query_block_only():
    """The model of hi = start_m * BLOCK_M: query block 0 sees no key (0/0), a later block's rows see
    the keys before their block only, finite and wrong; a case of one query block is all NaN, which the
    grader never names."""
    from flashlab.grading.cases import flash_scaled_reference
    from flashlab.grading.mistakes import DIAGONAL_BLOCK_SKIPPED, MISTAKES

    detector = next(d for name, d in MISTAKES[("ex08_kernel_causal", "flash_forward")]
                    if name == DIAGONAL_BLOCK_SKIPPED)
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 40, 16)).astype(np.float32) for _ in range(3))
    out = detector(dict(q=q, k=k, v=v, causal=True), dict(BLOCK_M=16, BLOCK_N=16))
    assert np.isnan(out[0, :16]).all() and np.isfinite(out[0, 16:]).all()
    right = flash_scaled_reference(q, k, v, causal=True)
    assert not np.allclose(out[0, 16:], right[0, 16:], atol=1e-3)
    row = 20  # sees keys 0-15 only: softmax of its scores over them
    s = q[0, row].astype(np.float64) @ k[0, :16].T.astype(np.float64) / 4.0
    expected = np.exp(s - s.max()) @ v[0, :16] / np.exp(s - s.max()).sum()
    np.testing.assert_allclose(out[0, row], expected, rtol=1e-5, atol=1e-6)
    assert np.isnan(detector(dict(q=q[:, :16], k=k, v=v, causal=True), dict(BLOCK_M=16, BLOCK_N=16))).all()


NEW_NAMES = ("stops one block early", "the causal mask is on the wrong side", "the brackets are missing",
             "without the factor P", "dS has the wrong sign", "D is broadcast along the wrong axis",
             "D must come from the whole row", "P is recomputed from scores without the scale",
             "each key tile's own softmax", "without the transpose", "rowsum(dO) without the factor O",
             "the max is taken over the wrong axis", "the chunk's max is not taken along each row")
NOT_NAMED_AS_THESE = [  # (exercise, edits): other mistakes, never given one of the names above
    ("ex10_tiled_backward", [("p = np.exp(s - lse[..., q0:q1, None])", "p = np.exp(s)")]),
    ("ex10_tiled_backward", [("dv_j += np.swapaxes(p, -1, -2) @ do_i", "dv_j += np.swapaxes(p, -1, -2) @ do_i / 2")]),
    ("ex10_tiled_backward", [("D = (do * o).sum(axis=-1)", "D = (o * o).sum(axis=-1)")]),
    ("ex02_softmax", [("e = np.exp(x - m)", "e = np.exp(x)"), ("l = l * np.exp(m - m_new) + ", "l = l + ")]),
    ("ex08_kernel_causal", [("qk = tl.where(offs_n[None, :] <= offs_m[:, None]", "qk = tl.where(offs_n[None, :] < "
                             "offs_m[:, None]")]),
    ("ex08_kernel_causal", [("qk = tl.dot(q, kt) * qk_scale", "qk = tl.dot(q, kt)")]),
]


@pytest.mark.parametrize("exercise, edits", NOT_NAMED_AS_THESE, ids=["P without lse", "dV halved", "D from O * O",
                                                                    "softmax max never subtracted", "strict mask",
                                                                    "no scale"])
def test_other_backward_and_causal_mistakes_do_not_get_these_names(tmp_path, exercise, edits):
    report = _edited_report(tmp_path, exercise, edits, 3)
    assert not report.passed and not any(name in str(report) for name in NEW_NAMES), str(report)


def test_an_exception_whose_message_cannot_be_printed_is_reported(tmp_path):
    text = (REPO / "solutions" / "ex12_triton_online_softmax.py").read_text()
    old = '        raise ValueError(f"block_n={block_n} must be a power of two >= 16")'
    assert old in text, "the solution changed: update this test"
    (tmp_path / "ex12_triton_online_softmax.py").write_text(text.replace(old, (
        "        class Unprintable(ValueError):\n            def __str__(self):\n                raise RuntimeError('no')\n"
        "        raise Unprintable()")))
    report = check("ex12_triton_online_softmax", exercises_dir=tmp_path, seed=3)
    failure = report.results[0]["failure"]
    assert "it raised Unprintable: (its message could not be turned into text)" in failure["message"], failure


def test_whole_nan_rows_of_a_kernel_output_are_named_as_never_stored_or_computed():
    from flashlab.grading.checks import compare
    from flashlab.grading.registry import get_exercise

    part = get_exercise("ex07_kernel_inner_loop").parts[0]
    expected = np.random.default_rng(0).standard_normal((1, 32, 16)).astype(np.float32)
    got = expected.copy()
    got.view(np.uint32)[0, 16:] = 0x7FC00003  # the launch tracker's poison, a NaN with a payload: never stored
    failure = compare(part, got, expected)
    assert "rows 16-31 of batch element 0 are NaN in full" in failure["message"], failure
    assert "grid covers every block of rows" in failure["message"]
    got[0, 16:] = np.nan  # a NaN without payload: computed, e.g. from the NaN around an input read past its end
    failure = compare(part, got, expected)
    assert "computed by your kernel" in failure["message"] and "load past the end of an input" in failure["message"]


def test_holds_output_finds_the_returned_values_in_any_float_view_of_the_derived_inputs():
    from flashlab.grading.checks import holds_output

    rng = np.random.default_rng(7)
    out = rng.standard_normal((4, 8, 16)).astype(np.float32)
    lure = np.full(1000, out.ravel()[0], np.float32)
    packed = np.concatenate([lure, out.ravel(), rng.standard_normal(50).astype(np.float32)])
    assert holds_output(packed, out)
    assert holds_output(packed.view(np.int32), out)  # a bit-view
    assert holds_output([packed[:700], packed[700:]], out)  # split over two buffers
    assert holds_output(np.ascontiguousarray(out.transpose(2, 1, 0)), out)  # another layout
    assert holds_output(out.astype(np.float64), out.astype(np.float16))  # stored by the kernel as float16
    assert not holds_output(rng.standard_normal(50000).astype(np.float32), out)
    assert not holds_output(out.ravel()[:-1].copy(), out)  # one value short
    assert not holds_output(np.zeros(64, np.float32), np.zeros((4, 4), np.float32))  # one repeated value
    signalling = np.full(8, 0x7F800001, np.uint32)  # bytes that read as float32 signalling NaNs
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a numpy warning would show in the learner's notebook
        assert not holds_output(signalling.view(np.int64), out)



LAUNCH = "nk, keys_per_split, scale, BLOCK_N=BLOCK_N, HEAD_DIM=d)"
TILES_AS_TRITON_BINDS_THEM = [  # (edits of the ex14 solution, whether its tile is over the limit of 128)
    ([(LAUNCH, "nk, keys_per_split, scale, BLOCK_N=tl.constexpr(256), HEAD_DIM=d)")], True),  # wrapped
    ([(LAUNCH, "nk, keys_per_split, scale, HEAD_DIM=d)"),  # the signature's default
      ("BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr", "HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr = 256")], True),
    # runtime ints given by keyword (keys_per_split is 144 in the two-split case) are not tiles
    ([(LAUNCH, "N_K=nk, keys_per_split=keys_per_split, qk_scale=scale, BLOCK_N=BLOCK_N, HEAD_DIM=d)")], False),
]


@pytest.mark.parametrize("edits, refused", TILES_AS_TRITON_BINDS_THEM, ids=["wrapped", "default", "runtime ints"])
def test_the_tile_limit_sees_the_tile_however_the_launch_binds_it(tmp_path, edits, refused):
    report = _edited_report(tmp_path, "ex14_split_kv_decode", edits, 3)
    result = report.graded[0][1]["split_kv_partials"]
    if refused:
        assert result["failure"]["kind"] == "launch", result["failure"]
        assert "decode_partial_kernel built a tile of 256" in result["failure"]["message"]
    else:
        assert result["status"] == "passed", result["failure"]


@pytest.mark.parametrize("name, refused", [
    ("nvmlInit_v2", False), ("nvmlDeviceGetCount_v2", False), ("cuGetErrorString", False),
    ("getpid", True), ("memcpy", True), ("__memcpy_chk", True), (b"bcopy", True), (7, True),
    ("curl_easy_escape", True), ("cuserid", True), ("cuMemcpyDtoH_v2", True), ("hipMemset", True),
])
def test_exercise_15_looks_up_only_the_gpu_libraries_c_functions(monkeypatch, name, refused):
    """In a torch_only exercise, from the module's load on, a C function looked up through ctypes must be one
    that torch calls so (NVML for the device count, the CUDA driver): any other name, the C library's copy
    functions under whatever name, or an ordinal, is a forbidden call naming the function."""
    from flashlab.grading import child

    monkeypatch.setattr(child, "RAW_MEMORY", [True])
    monkeypatch.setattr(child, "CALLS", [])
    if not refused:
        child._audit_ctypes("ctypes.dlsym", (None, name))
        assert child.CALLS == []
        return
    with pytest.raises(child.ForbiddenCall):
        child._audit_ctypes("ctypes.dlsym", (None, name))
    assert "calling the C function" in child.CALLS[0]
    monkeypatch.setattr(child, "RAW_MEMORY", [False])  # before the module's load: nothing is refused
    child._audit_ctypes("ctypes.dlsym", (None, name))


def test_a_padded_copy_of_the_inputs_is_told_apart_from_a_product_of_them():
    """A derived kernel input far larger than the inputs is refused as S, P or dS computed outside the
    kernel unless it holds the inputs padded with one fill value: zeros, -inf or NaN, K and V side by
    side, or cast to another dtype. Products of the inputs are not padded copies, however padded."""
    import torch

    from flashlab.grading.child import _padded_copy

    rng = np.random.default_rng(11)
    k = torch.from_numpy(rng.standard_normal((1, 37, 16), dtype=np.float32))
    v = torch.from_numpy(rng.standard_normal((1, 37, 16), dtype=np.float32))
    inputs = [k, v]
    for fill in (0.0, -np.inf, np.nan):
        padded = np.full((1, 256, 16), fill, np.float32)
        padded[:, :37] = k.numpy()
        assert _padded_copy(padded, inputs), fill
    both = np.zeros((2, 128, 16), np.float32)
    both[0, :37], both[1, :37] = k.numpy()[0], v.numpy()[0]
    assert _padded_copy(both, inputs)
    half = np.zeros((1, 128, 16), np.float16)
    half[:, :37] = k.numpy().astype(np.float16)
    assert _padded_copy(half, inputs)
    scores = np.zeros((1, 64, 64), np.float32)
    scores[:, :37, :37] = k.numpy()[0] @ v.numpy()[0].T
    assert not _padded_copy(scores, inputs)
    probabilities = np.exp(scores - scores.max(-1, keepdims=True))
    assert not _padded_copy(probabilities, inputs)


HONEST = Path(__file__).resolve().parent / "honest_variants"


def test_the_report_shows_other_causes_first_counts_the_rest_and_groups_repeats():
    """A learner must see every distinct cause, not three repeats of the first with the rest dropped."""
    failure = dict(kind="value", case="public", group="public", why="", message="out: max abs error 1")
    repeats = [f"hidden check c{i}: the same problem" for i in range(4)]
    causes = [f"hidden check n{i}: out: NaN at index (0,)" for i in range(5)]
    lines = Report._failure_lines(dict(exercise="ex07_kernel_inner_loop", failure=failure,
                                       failures=repeats[:2] + causes + repeats[2:]))
    assert [line for line in lines if line.startswith("also failed: ")] == [f"also failed: {c}" for c in causes[:3]]
    assert any("2 more failed checks with other causes" in line and "--json" in line for line in lines), lines
    assert "also failed the same way: 4 more checks (hidden check c0; hidden check c1; hidden check c2; ...)" in lines


def test_a_wrong_batch_offset_is_named_when_only_later_batch_elements_are_wrong():
    """A kernel whose batch offset is wrong passes the one-element public check and gets every later
    element wrong: the report says so, and says nothing of it when element 0 is wrong too."""
    part = next(p for p in EXERCISES["ex07_kernel_inner_loop"].parts if p.function == "flash_forward")
    expected = np.random.default_rng(11).standard_normal((3, 5, 4)).astype(np.float32)  # (Z, Nq, d)
    later = expected.copy()
    later[1:] += 1.0
    assert "batch element 0 is right" in compare(part, later, expected)["message"]
    nan_later = expected.copy()
    nan_later[1:, 2:] = np.nan
    nan_later[1:, :2] += 1.0
    assert "batch element 0 is right" in compare(part, nan_later, expected)["message"]
    everywhere = expected + 1.0
    assert "batch element" not in compare(part, everywhere, expected)["message"]
    one_row = expected.copy()
    one_row[2, 0] += 1.0
    assert "batch element 0 is right" not in compare(part, one_row, expected)["message"]


def test_the_relaunch_contract_accepts_attention_either_way_and_names_what_is_wrong():
    """grading.contracts judges what a kernel launched again on the grader's inputs wrote: attention
    with qk_scale read as a natural-log scale or as one times log2(e) (exp2 kernels) passes; a mean of
    V's rows (what a kernel that decodes an answer in disguise computes), an unwritten output or the
    causal mask left out fail, named; a missing or refused relaunch fails."""
    from flashlab.grading import contracts

    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((2, n, 16)) for n in (7, 11, 11))
    scale = 0.25

    def attention(s, causal=False):
        scores = s * np.einsum("zmd,znd->zmn", q, k)
        if causal:
            scores = np.where(np.arange(11)[None, :] <= np.arange(7)[:, None], scores, -np.inf)
        p = np.exp(scores - scores.max(-1, keepdims=True))
        return np.einsum("zmn,znd->zmd", p / p.sum(-1, keepdims=True), v)

    def record(out, causal=False, **scalars):
        return dict(kernel="flash_fwd_kernel", launches=[dict(inputs=dict(Q=q, K=k, V=v), outputs=dict(Out=out),
                                                              scalars=dict(causal=causal, **scalars))])

    judge = contracts.judge_replay
    assert judge(("flash_fwd_kernel",), record(attention(scale), qk_scale=scale)) is None
    assert judge(("flash_fwd_kernel",), record(attention(scale), qk_scale=scale / np.log(2.0))) is None
    assert judge(("flash_fwd_kernel",), record(attention(scale, True), True, qk_scale=scale)) is None
    assert judge(("flash_fwd_kernel",), record(attention(0.3)), case_scale=0.3) is None  # no qk_scale: the case's
    assert judge(("flash_fwd_kernel",), record(attention(1.0)), case_scale=0.3) is None  # or 1 (folded into q)
    mean = np.broadcast_to(v.mean(1, keepdims=True), q.shape).copy()
    message = judge(("flash_fwd_kernel",), record(mean, qk_scale=scale))
    assert "did not compute softmax(qk_scale Q K^T) V" in message and "elements wrong" in message, message
    assert "did not compute" in judge(("flash_fwd_kernel",), record(attention(scale), True, qk_scale=scale))
    unwritten = attention(scale)
    unwritten[1, 3] = np.nan
    assert "NaN (never written)" in judge(("flash_fwd_kernel",), record(unwritten, qk_scale=scale))
    assert "could not launch flash_fwd_kernel again" in judge(("flash_fwd_kernel",), None)
    refused = judge(("flash_fwd_kernel",), dict(kernel="flash_fwd_kernel", error="it has no parameter Q"))
    assert "and could not: it has no parameter Q" in refused
    assert judge(("bwd_preprocess_kernel",), None) is None  # a kernel without a contract is not launched again
    two = record(attention(scale), qk_scale=scale)
    two["launches"].append(record(mean, qk_scale=scale)["launches"][0])  # a second launch, wrong: named
    assert "launch 2 of the 2 run again), did not compute" in judge(("flash_fwd_kernel",), two)
    x, y = rng.standard_normal(9), rng.standard_normal(9)

    def add(out):
        return dict(kernel="add_kernel", launches=[dict(inputs=dict(X=x, Y=y), outputs=dict(Out=out), scalars={})])

    assert judge(("add_kernel",), add(x + y)) is None
    assert "did not compute X + Y" in judge(("add_kernel",), add(x))


def test_the_backward_contract_accepts_gradients_read_either_way_and_names_a_missing_mask():
    """The backward kernels launched again are judged against gradients from torch's autograd of
    attention (float64) on the relaunch's inputs: with sm_scale and LSE as given, or both in log2
    units (an exp2 kernel); zeros the wrapper allocated, left unwritten at keys no causal query row
    sees, pass; a dK without the causal mask, an output left unwritten elsewhere, or half the
    inputs (an answer in disguise decoded) fail, named."""
    import torch

    from flashlab.grading import contracts

    rng = np.random.default_rng(8)
    n_q, n_k, d, scale = 6, 13, 16, 0.3
    q, k, v, do = (torch.tensor(rng.standard_normal((2, n, d)), requires_grad=True) for n in (n_q, n_k, n_k, n_q))

    def gradients(causal):
        scores = scale * torch.einsum("zmd,znd->zmn", q, k)
        if causal:
            scores = scores.masked_fill(torch.arange(n_k)[None, :] > torch.arange(n_q)[:, None], float("-inf"))
        lse = torch.logsumexp(scores, -1)
        out = torch.einsum("zmn,znd->zmd", torch.exp(scores - lse[..., None]), v)
        dq, dk, dv = torch.autograd.grad(out, (q, k, v), do.detach())
        delta = (do * out).sum(-1)
        return {name: t.detach().numpy() for name, t in
                dict(lse=lse, delta=delta, dQ=dq, dK=dk, dV=dv).items()}

    def record(kernel, outputs, causal=False, lse_unit=1.0, **scalars):
        grads = gradients(causal)
        inputs = dict(Q=q.detach().numpy(), K=k.detach().numpy(), V=v.detach().numpy(), dO=do.detach().numpy(),
                      LSE=grads["lse"] * lse_unit, Delta=grads["delta"])
        return dict(kernel=kernel, launches=[dict(inputs=inputs, outputs=outputs, scalars=dict(causal=causal,
                                                                                                **scalars))])

    judge = contracts.judge_replay
    for causal in (False, True):
        g = gradients(causal)
        assert judge(("flash_bwd_dkdv_kernel",), record("flash_bwd_dkdv_kernel", dict(dK=g["dK"], dV=g["dV"]), causal,
                                                        sm_scale=scale)) is None
        assert judge(("flash_bwd_dq_kernel",), record("flash_bwd_dq_kernel", dict(dQ=g["dQ"]), causal,
                                                      sm_scale=scale)) is None
        log2 = 1 / np.log(2.0)  # an exp2 kernel handed sm_scale and lse times log2(e)
        assert judge(("flash_bwd_dkdv_kernel",), record("flash_bwd_dkdv_kernel", dict(dK=g["dK"], dV=g["dV"]), causal,
                                                        log2, sm_scale=scale * log2)) is None
    g = gradients(True)
    unseen = dict(dK=g["dK"].copy(), dV=g["dV"].copy())
    for t in unseen.values():
        assert np.all(t[:, n_q:] == 0.0)  # keys 6..12 are seen by no query row
        t[:, n_q:] = np.nan
    assert judge(("flash_bwd_dkdv_kernel",), record("flash_bwd_dkdv_kernel", unseen, True, sm_scale=scale)) is None
    claimed = dict(dK=g["dK"].copy(), dV=g["dV"].copy())  # a launch claiming N_Q = 1 leaves keys 1..5 at zero
    for t in claimed.values():
        t[:, 1:] = 0.0
    tiny = record("flash_bwd_dq_kernel", dict(dQ=g["dQ"]), True, sm_scale=scale, call_N_Q=1, call_N_K=1, call_HEAD_DIM=1)
    case = dict(q=np.zeros((2, n_q, d)), k=np.zeros((2, n_k, d)))
    assert "was never launched at the problem's sizes (N_Q = 6, N_K = 13, HEAD_DIM = 16)" in judge(
        ("flash_bwd_dq_kernel",), tiny, case_kwargs=case)
    tiny["launches"][0]["scalars"].update(call_N_Q=n_q, call_N_K=n_k, call_HEAD_DIM=d)
    assert judge(("flash_bwd_dq_kernel",), tiny, case_kwargs=case) is None
    fake = record("flash_bwd_dkdv_kernel", claimed, True, sm_scale=scale, n_q_call=1)
    assert "did not compute dK and dV" in judge(("flash_bwd_dkdv_kernel",), fake, case_kwargs=dict(q=np.zeros((2, n_q, d))))
    seen = dict(dK=g["dK"].copy(), dV=g["dV"])
    seen["dK"][1, 2] = np.nan
    message = judge(("flash_bwd_dkdv_kernel",), record("flash_bwd_dkdv_kernel", seen, True, sm_scale=scale))
    assert "dK[1, 2, " in message and "NaN (never written)" in message, message
    unmasked = gradients(False)
    message = judge(("flash_bwd_dkdv_kernel",), record("flash_bwd_dkdv_kernel", dict(dK=unmasked["dK"], dV=g["dV"]),
                                                       True, sm_scale=scale))
    assert "did not compute dK and dV of attention" in message and "dK[" in message, message
    halves = dict(dK=k.detach().numpy() / 2, dV=v.detach().numpy() / 2)
    assert "did not compute dK and dV" in judge(("flash_bwd_dkdv_kernel",),
                                                record("flash_bwd_dkdv_kernel", halves, sm_scale=scale))
    assert "did not compute dQ of attention" in judge(("flash_bwd_dq_kernel",), record(
        "flash_bwd_dq_kernel", dict(dQ=q.detach().numpy() / 2), sm_scale=scale))
    small = dict(dK=g["dK"] * 1e-3, dV=g["dV"] * 1e-3)  # every value under ATOL: zeros are judged by the norm
    zeros = dict(dK=np.zeros_like(g["dK"]), dV=np.zeros_like(g["dV"]))
    assert np.abs(small["dK"]).max() < contracts.ATOL and np.abs(small["dV"]).max() < contracts.ATOL
    assert contracts._misses(small["dV"], small["dV"] * 1.01)[0] == 0
    assert contracts._misses(zeros["dV"], small["dV"])[0] > 0
    assert contracts._misses(zeros["dV"], np.zeros_like(small["dV"]))[0] == 0


def test_the_split_state_contract_accepts_any_run_of_keys_per_slot_and_names_a_mean_of_v():
    """decode_partial_kernel launched again: each slot it writes must hold the partial state (o, lse) of some
    run of consecutive keys (the split bounds are the kernel's own rule: N_K and keys_per_split, or length
    tensors the grader keeps), an empty run as (0, -inf); a slot left NaN is accepted beside written ones.
    A mean of V's rows with lse = log(count) (a kernel that decodes an answer in disguise), a launch that
    wrote nothing and a written o beside an unwritten lse fail, named."""
    from flashlab.grading import contracts

    rng = np.random.default_rng(7)
    z, nk, d, scale = 2, 13, 8, 0.3
    q, k, v = rng.standard_normal((z, d)), rng.standard_normal((z, nk, d)), rng.standard_normal((z, nk, d))

    def state(zi, lo, hi, s=scale):
        if hi <= lo:
            return np.zeros(d), -np.inf
        x = s * (k[zi, lo:hi] @ q[zi])
        lse = np.logaddexp.reduce(x)
        return np.exp(x - lse) @ v[zi, lo:hi], lse

    def record(runs, s=scale, **scalars):  # runs[z][slot] = (lo, hi), or None: the slot left NaN
        o, lse = np.full((z, len(runs[0]), d), np.nan), np.full((z, len(runs[0])), np.nan)
        for zi, row in enumerate(runs):
            for j, run in enumerate(row):
                if run is not None:
                    o[zi, j], lse[zi, j] = state(zi, *run, s=s)
        return dict(kernel="decode_partial_kernel", launches=[dict(inputs=dict(Q=q, K=k, V=v), scalars=scalars,
                                                                   outputs=dict(O_part=o, LSE_part=lse))])

    judge = contracts.judge_replay
    splits = [[(0, 5), (5, 10), (10, 13), (13, 13)]] * z  # ceil(13 / 4) = 4 keys... any runs, one empty
    assert judge(("decode_partial_kernel",), record(splits, qk_scale=scale)) is None
    assert judge(("decode_partial_kernel",), record([[(2, 9), None], [(0, 13), (4, 5)]], qk_scale=scale)) is None
    assert judge(("decode_partial_kernel",), record(splits, s=scale * np.log(2.0), qk_scale=scale)) is None  # exp2
    assert judge(("decode_partial_kernel",), record(splits, s=0.4), case_scale=0.4) is None  # a scale tensor
    mean = record(splits, qk_scale=scale)
    launch = mean["launches"][0]["outputs"]
    for zi in range(z):
        for j, (lo, hi) in enumerate(splits[zi][:3]):
            launch["O_part"][zi, j], launch["LSE_part"][zi, j] = v[zi, lo:hi].mean(0), np.log(hi - lo)
    message = judge(("decode_partial_kernel",), mean)
    assert "did not compute the partial state (o_s, lse_s) of its split's keys" in message, message
    assert "random Q, K, V with N_K = 13 keys per sequence, qk_scale = 0.3" in message, message
    nothing = record([[None] * 4] * z, qk_scale=scale)
    assert "NaN (never written)" in judge(("decode_partial_kernel",), nothing)
    half = record(splits, qk_scale=scale)
    half["launches"][0]["outputs"]["LSE_part"][1, 2] = np.nan
    assert "LSE_part[1, 2] holds NaN (never written)" in judge(("decode_partial_kernel",), half)
    # with keys_per_split, whole splits [j * 5, min((j + 1) * 5, 13)) only; empty only where the call's LSE was
    whole = record(splits, qk_scale=scale, keys_per_split=5, n_keys=13)
    assert judge(("decode_partial_kernel",), whole) is None
    short = record([[(0, 2), (5, 10), (10, 13), (13, 13)]] * z, qk_scale=scale, keys_per_split=5, n_keys=13)
    assert "did not compute" in judge(("decode_partial_kernel",), short)  # a softmax over two keys of a split
    after = whole["launches"][0]["outputs"]["LSE_part"].copy()  # what the call itself left: the last split empty
    whole["launches"][0]["inputs"]["LSE_after_call"] = after
    whole["launches"][0]["outputs"]["O_part"][:, 3] = np.nan  # o left unwritten beside lse = -inf: accepted
    assert judge(("decode_partial_kernel",), whole) is None
    emptied = record([[(13, 13)] * 4] * z, qk_scale=scale, keys_per_split=5, n_keys=13)
    emptied["launches"][0]["inputs"]["LSE_after_call"] = after
    assert "LSE_part[0, 0] holds -inf where" in judge(("decode_partial_kernel",), emptied)
    case = dict(k=k[:, :13], num_splits=3)  # the case's own sizes: splits of ceil(13 / 3) = 5 keys
    assert judge(("decode_partial_kernel",), whole, case_kwargs=case) is None
    assert "keys_per_split = 5 with N_K = 13 keys in 2 splits" in judge(("decode_partial_kernel",), whole,
                                                                         case_kwargs=dict(case, num_splits=2))
    emptied["launches"][0]["inputs"]["LSE_after_call"] = np.full((z, 4), -np.inf)  # the call's LSE_part empty too
    assert "wrote only empty states" in judge(("decode_partial_kernel",), emptied, case_kwargs=case)


@pytest.mark.parametrize("path", sorted(HONEST.glob("ex*.py")), ids=lambda p: p.stem)
def test_an_honest_variant_written_differently_from_the_solution_gets_full_marks(tmp_path, path):
    """Correct work the grader must not refuse: D by a preprocessing kernel of the learner's (the
    torch rules apply after the required kernel, not after any launch), one launch per batch
    element or per split, float32 inside and a cast back, K transposed in the wrapper, gradients of
    non-leaf views. Each file's docstring says what it does differently."""
    prefix = path.stem.split("_")[0] + "_"
    name = next(e for e in EXERCISES if e.startswith(prefix))
    shutil.copy(path, tmp_path / f"{name}.py")
    report = check(name, exercises_dir=tmp_path, seed=3)
    assert report.passed and report.score == report.total, str(report)


@pytest.mark.parametrize("shift, mask, words", [
    (0, True, None),
    (0, False, "up to 6 elements past the end of Out (shape (10,))"),
    (3, True, "up to 3 elements before the start of Out (shape (10,))"),
])
def test_store_guards_find_a_store_outside_its_tensor_and_put_every_byte_back(shift, mask, words):
    """The GPU's check of stores (the interpreter's, MemoryBounds, sees each access; compiled kernels
    are not seen): the launch runs on guarded copies of its tensors, a store outside them lands in a
    guard band and is named, and what the kernel wrote inside its tensors is copied back. Here X and
    Out are two views of one buffer, as a learner's scratch slices may be; on a GPU the kernel runs
    compiled, on the CPU in the interpreter (a store past the end writes real memory there too)."""
    import torch
    import triton
    import triton.language as tl

    from flashlab.grading.bounds import OutOfBounds, StoreGuards
    from flashlab.grading.child import _named_tensors

    @triton.jit
    def add_one(X, Out, n, BLOCK: tl.constexpr, SHIFT: tl.constexpr, MASKED: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        x = tl.load(X + offs, mask=offs < n, other=0.0)
        if MASKED:
            tl.store(Out + offs - SHIFT, x + 1.0, mask=offs < n)
        else:
            tl.store(Out + offs - SHIFT, x + 1.0)

    device = "cuda" if torch.cuda.is_available() else "cpu"
    frame = torch.full((64,), 7.0, device=device)
    x, out = frame[4:14], frame[30:40]
    x.copy_(torch.arange(10, dtype=torch.float32, device=device))
    expected = frame.clone()
    expected[30 - shift:40 - shift] = x + 1.0
    args, kwargs = (x, out, 10), dict(grid=(1,), warmup=False, BLOCK=16, SHIFT=shift, MASKED=mask)
    if words is None:
        StoreGuards().launch(type(add_one).run, add_one, args, kwargs, _named_tensors(add_one, args, kwargs))
        assert torch.equal(frame, expected)
        return
    before = frame.clone()
    with pytest.raises(OutOfBounds, match=r"a tl\.store wrote outside every tensor .*" + words.replace("(", r"\(").replace(")", r"\)")):
        StoreGuards().launch(type(add_one).run, add_one, args, kwargs, _named_tensors(add_one, args, kwargs))
    inside = torch.zeros(64, dtype=torch.bool, device=device)
    inside[30:40] = True
    assert torch.equal(frame[inside], expected[inside]), "what landed inside Out is copied back"
    assert torch.equal(frame[~inside], before[~inside]), "nothing outside Out was written"


@pytest.mark.parametrize("row_step, words", [(None, None), (8, "between the elements of Out (shape (4, 8), strides (12, 1))")])
def test_store_guards_keep_strided_and_expanded_tensors_and_name_a_store_between_rows(row_step, words):
    """Out is a column slice of a wider buffer (rows 12 elements apart) and Scale an expanded scalar
    (stride 0, every element one float): both are copied as they are; a kernel that steps rows by
    the row length instead of Out's stride writes between its rows, into the guard."""
    import torch
    import triton
    import triton.language as tl

    from flashlab.grading.bounds import OutOfBounds, StoreGuards
    from flashlab.grading.child import _named_tensors

    @triton.jit
    def scaled_rows(Out, Scale, stride_row, COLS: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, COLS)
        tl.store(Out + row * stride_row + cols, (row * COLS + cols).to(tl.float32) * tl.load(Scale + cols * 0))

    device = "cuda" if torch.cuda.is_available() else "cpu"
    wide = torch.full((4, 12), 7.0, device=device)
    out, scale = wide[:, :8], torch.full((1,), 2.0, device=device).expand(8)
    before = wide.clone()
    args, kwargs = (out, scale, row_step or out.stride(0)), dict(grid=(4,), warmup=False, COLS=8)
    if words is None:
        StoreGuards().launch(type(scaled_rows).run, scaled_rows, args, kwargs, _named_tensors(scaled_rows, args, kwargs))
        assert torch.equal(out, 2.0 * torch.arange(32, dtype=torch.float32, device=device).view(4, 8))
        assert torch.equal(wide[:, 8:], before[:, 8:]), "the columns between the rows are left alone"
        return
    with pytest.raises(OutOfBounds, match=words.replace("(", r"\(").replace(")", r"\)")):
        StoreGuards().launch(type(scaled_rows).run, scaled_rows, args, kwargs, _named_tensors(scaled_rows, args, kwargs))
    assert torch.equal(wide[:, 8:], before[:, 8:]), "nothing between the rows was written"


def test_store_guards_copy_the_tensors_beside_a_tensor_descriptor():
    """A launch given a TensorDescriptor: the memory it describes stays in place (TMA clips its
    stores), and the launch's other tensors are still copied between watched bytes."""
    import torch
    import triton
    import triton.language as tl
    from triton.tools.tensor_descriptor import TensorDescriptor

    from flashlab.grading.bounds import OutOfBounds, StoreGuards
    from flashlab.grading.child import _named_tensors

    @triton.jit
    def add_one_beside(X, Out, n, Table, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        x = tl.load(X + offs, mask=offs < n, other=0.0)
        tl.store(Out + offs, x + 1.0)  # no mask: 6 elements past the end of Out

    device = "cuda" if torch.cuda.is_available() else "cpu"
    frame = torch.full((64,), 7.0, device=device)
    x, out = frame[4:14], frame[30:40]
    table = TensorDescriptor.from_tensor(torch.zeros(16, 16, device=device), [16, 16])
    args, kwargs = (x, out, 10, table), dict(grid=(1,), warmup=False, BLOCK=16)
    named = _named_tensors(add_one_beside, args, kwargs)
    assert [label for label, _ in named] == ["X", "Out", "Table.base"], named
    with pytest.raises(OutOfBounds, match=r"up to 6 elements past the end of Out"):
        StoreGuards().launch(type(add_one_beside).run, add_one_beside, args, kwargs, named)
    assert torch.equal(frame[40:], torch.full((24,), 7.0, device=device)), "nothing past Out was written"


def test_store_guards_give_namedtuples_back_as_namedtuples():
    from collections import namedtuple

    import torch

    from flashlab.grading.bounds import StoreGuards

    Mat = namedtuple("Mat", ["ptr", "stride_m"])
    x, copy = torch.zeros(3), torch.ones(3)
    swapped = StoreGuards._swap((Mat(x, 1), [x, 2], {"k": (x,)}), {id(x): copy})
    assert type(swapped[0]) is Mat and swapped[0].ptr is copy and swapped[0].stride_m == 1
    assert swapped[1][0] is copy and swapped[2]["k"][0] is copy


def test_a_launch_that_raises_leaves_the_buffers_it_was_given_as_they_were():
    """An autotuner tries its next config after one fails (out of resources on a GPU): the buffers
    the tracker poisoned for the failed launch must hold what they held before it."""
    import torch

    from flashlab.grading.child import LaunchTracker

    tracker = LaunchTracker(set())
    q = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
    tracker.reset([q])
    derived = torch.arange(8, dtype=torch.float32)  # computed outside the kernel: poisoned before a launch
    tracker.before([q, derived])
    assert torch.isnan(derived).all()
    tracker.abandon()
    assert torch.equal(derived, torch.arange(8, dtype=torch.float32)) and tracker.pending == []


def test_bytecode_python_writes_for_an_unchanged_source_is_not_tampering(tmp_path):
    """A module imported for the first time while an exercise runs (an editable install, another
    notebook's check) gets its .pyc written then: that is not a change to the grader. Bytecode whose
    code differs from its source's, or whose header does not match the source, still is (the H200's
    closing run of 2026-12-01 refused nine verdicts for a report.pyc written by a notebook's import)."""
    import importlib._bootstrap_external as bootstrap
    import importlib.util
    import os
    import py_compile

    from flashlab.grading.checks import _bytecode_of_unchanged_source

    source = tmp_path / "pkg" / "mod.py"
    source.parent.mkdir()
    source.write_text("def f(x):\n    return x + 1\n")
    cache = Path(importlib.util.cache_from_source(str(source)))
    py_compile.compile(str(source), cfile=str(cache), doraise=True)
    assert _bytecode_of_unchanged_source(str(cache), set())
    assert not _bytecode_of_unchanged_source(str(cache), {str(source)}), "the source itself changed"
    stat = os.stat(source)
    planted = compile("def f(x):\n    return 0\n", str(source), "exec")
    cache.write_bytes(bootstrap._code_to_timestamp_pyc(planted, stat.st_mtime, stat.st_size))
    assert not _bytecode_of_unchanged_source(str(cache), set()), "other code under the source's header"
    honest = compile(source.read_text(), str(source), "exec")
    cache.write_bytes(bootstrap._code_to_timestamp_pyc(honest, stat.st_mtime + 7, stat.st_size))
    assert not _bytecode_of_unchanged_source(str(cache), set()), "a header Python would not accept"
    cache.unlink()
    assert _bytecode_of_unchanged_source(str(cache), set()), "a cache removed: the source is compiled again"
    assert not _bytecode_of_unchanged_source(str(source), set()), "only bytecode"


def test_a_required_kernel_launched_from_another_module_is_named_as_such(tmp_path):
    """Kernels kept in a module of their own are not followed by the launch tracker (their accesses
    are still checked): the report says where the required kernel was defined, not that it never ran."""
    text = (REPO / "solutions" / "ex06_triton_primer.py").read_text()
    old = "\n\ndef vector_add(x, y):"
    assert old in text, "the solution changed: update this test"
    (tmp_path / "ex06_triton_primer.py").write_text(text.replace(old, '\nadd_kernel.fn.__module__ = "helpers"\n' + old))
    report = check("ex06_triton_primer", exercises_dir=tmp_path, seed=3)
    failure = report.results[0]["failure"]
    assert report.results[0]["status"] == "failed", report.results[0]
    assert "launched a kernel add_kernel defined in module helpers, not in your exercise file" in failure["message"], failure


def _fake_report(parts: dict, points: dict, hint=None):
    from types import SimpleNamespace

    from flashlab.grading.report import Report

    results = {name: dict(function=name, status=status, earned=earned, points=points[name], hints=["a", "b", "c"],
                          failure=dict(hint=2) if status == "failed" else None, exercise="ex04_causal_tiles")
               for name, (status, earned) in parts.items()}
    exercise = SimpleNamespace(name="selftest", title="self-tests", points=sum(points.values()))
    return Report([(exercise, results)], hint=hint)


def test_score_table_counts_parts_per_status_and_aligns_fractional_points():
    parts = {"q1": ("passed", 0.25), "q2": ("failed", 0)} | {f"n{i}": ("not attempted", 0) for i in range(42)}
    points = {"q1": 0.25, "q2": 0.25} | {f"n{i}": 0.25 for i in range(42)}
    table = _fake_report(parts, points).table().splitlines()
    assert table[1].split() == ["selftest", "0.25/11", "1", "passed,", "1", "failed,", "42", "not", "attempted"], table
    ends = {table[0].index("points") + len("points")} | {
        line.index("/") + 1 + len(line.split("/")[1].split()[0]) for line in table[1:]}
    assert len(ends) == 1, "the points column is not right-aligned:\n" + "\n".join(table)


def test_json_lists_the_hints_each_part_shows_the_pointed_one_at_the_default_level():
    report = _fake_report({"f": ("failed", 0), "p": ("passed", 1)}, {"f": 1, "p": 1})
    data = report.to_dict()
    parts = {p["function"]: p for p in data["exercises"][0]["parts"]}
    assert data["hint"] == 1  # the level: the default
    assert parts["f"]["hints_shown"] == [2] and parts["p"]["hints_shown"] == []
    asked = _fake_report({"f": ("failed", 0)}, {"f": 1}, hint=1).to_dict()
    assert asked["exercises"][0]["parts"][0]["hints_shown"] == [2, 1]


def test_causal_tile_cases_say_what_is_true_of_each_case():
    import numpy as np

    from flashlab.grading import cases

    for seed in range(20):
        for case in cases.tile_skip_hidden(np.random.default_rng(seed)):
            kw = case.kwargs
            ragged = (kw["i"] + 1) * kw["block_q"] > kw["nq"]
            assert case.hint == (2 if ragged else 1), (case.label, case.hint)
            assert ("ragged" in case.why) == ragged, (case.label, case.why)
            if "block_q" in case.why:
                assert ("block_q == block_k" in case.why) == (kw["block_q"] == kw["block_k"]), (case.label, case.why)
