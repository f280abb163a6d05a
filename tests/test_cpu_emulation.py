"""RETRIEVAL_EMULATE_CPU: the package and torch's kernels act as on a lesser x86 CPU."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from retrieval.runtime import precision

REPORT = ("import retrieval, torch; from retrieval.runtime import precision as p; "
          "print(p.instruction_sets(), p.cpu_has_bf16(), p.int8_kernel(),"
          " torch.backends.cpu.get_cpu_capability(), os.environ['FBGEMM_ENABLE_INSTRUCTIONS'], sep='|')")


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", f"import os; {code}"], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=120)


@pytest.mark.skipif("avx2" not in precision.machine_cpu_flags(), reason="needs an x86 CPU with AVX2")
def test_avx2_emulation_hides_newer_instructions_and_caps_torch():
    out = run_python(REPORT, RETRIEVAL_EMULATE_CPU="avx2")
    assert out.returncode == 0, out.stderr
    sets, bf16, kernel, aten, fbgemm = out.stdout.strip().split("|")
    assert "bf16 no, AVX-512 no, VNNI no, AVX2 yes" in sets and "RETRIEVAL_EMULATE_CPU=avx2" in sets
    assert (bf16, kernel, aten, fbgemm) == ("False", "avx2", "AVX2", "AVX2")


def test_an_unknown_cpu_is_a_one_line_error_from_the_cli(tmp_path):
    out = subprocess.run([sys.executable, "-m", "retrieval.cli", "rerank", "--index", str(tmp_path),
                          "--topics", "x", "--run", "y"], capture_output=True, text=True,
                         env={**os.environ, "RETRIEVAL_EMULATE_CPU": "arm"}, timeout=120)
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert "RETRIEVAL_EMULATE_CPU='arm': expected one of avx2, avx512-vnni" in out.stderr


def test_emulation_refuses_once_torch_chose_its_kernels():
    """Caps set after torch ran a kernel would change nothing: say so rather than mislabel a result."""
    if "avx512f" not in precision.machine_cpu_flags():
        pytest.skip("this CPU's torch kernels are AVX2 already")
    code = ("import torch; torch.ones(4).sum(); torch.backends.cpu.get_cpu_capability(); "
            "import retrieval; from retrieval.runtime import precision as p; p.cpu_flags()")
    out = run_python(code, RETRIEVAL_EMULATE_CPU="avx2")
    assert out.returncode != 0 and "torch already dispatches to AVX512 kernels" in out.stderr
