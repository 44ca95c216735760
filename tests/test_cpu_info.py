"""cpu_info reads the CPU model and its bfloat16 flags from fake /proc/cpuinfo text."""

import pytest

from t2t_keras.perf import cpu_info


def _cpuinfo(flags, name="AMD EPYC", family="25", model="17", processors=2):
  """/proc/cpuinfo text as Linux writes it on x86: one block per processor."""
  block = (f"processor\t: {{i}}\nvendor_id\t: AuthenticAMD\ncpu family\t: {family}\n"
           f"model\t\t: {model}\nmodel name\t: {name}\nstepping\t: 1\n"
           f"flags\t\t: {flags}\nbogomips\t: 5192.29\n")
  return "\n".join(block.format(i=i) for i in range(processors)) + "\n"


ZEN3 = "fpu sse sse2 avx fma avx2"
ZEN4 = "fpu sse sse2 avx fma avx2 avx512f avx512_vnni avx512_bf16"
SAPPHIRE_RAPIDS = "fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8"


@pytest.mark.parametrize("flags,native", [
    ("fpu avx2 fma avx512f avx512_bf16", True), ("fpu avx2 amx_bf16 amx_tile", True),
    ("fpu avx2 fma avx512f avx512_vnni", False), ("fpu avx2 fma", False)])
def test_native_bfloat16_reads_the_cpu_flags(flags, native):
  cpuinfo = f"processor\t: 0\nmodel name\t: Some CPU bf16\nflags\t\t: {flags}\n"
  assert cpu_info.native_bfloat16(cpuinfo) is native
  assert cpu_info.native_bfloat16("processor : 0\n") is False


def test_a_flag_name_inside_the_model_name_or_a_longer_flag_does_not_count():
  # "bf16" in the model name, and flags that merely start like the real ones.
  cpuinfo = _cpuinfo("fpu avx2 avx512_bf16x amx_bf16_tile", name="Fake avx512_bf16 CPU")
  assert cpu_info.native_bfloat16(cpuinfo) is False


def test_cpu_model_has_the_name_family_and_model():
  assert cpu_info.cpu_model(_cpuinfo(ZEN3)) == "AMD EPYC (family 25 model 17)"
  # Without family/model lines (ARM): the name alone.
  assert cpu_info.cpu_model("processor\t: 0\nmodel name\t: ARMv8 Processor rev 1\n") == (
      "ARMv8 Processor rev 1")


def test_only_the_first_processor_block_is_read():
  first = _cpuinfo(ZEN3, processors=1)
  second = _cpuinfo(ZEN4, name="Other", family="26", model="1", processors=1)
  text = first + "\n" + second
  assert cpu_info.cpu_flags(text) == frozenset(ZEN3.split())
  assert cpu_info.cpu_model(text) == "AMD EPYC (family 25 model 17)"


def test_arm_features_line_is_read_as_the_flags():
  assert cpu_info.cpu_flags("processor\t: 0\nFeatures\t: fp asimd bf16\n") == {
      "fp", "asimd", "bf16"}


def test_describe_is_one_line_with_the_reason():
  assert cpu_info.describe(_cpuinfo(ZEN3)) == (
      "AMD EPYC (family 25 model 17); native bfloat16: no (no avx512_bf16/amx_bf16)")
  assert cpu_info.describe(_cpuinfo(ZEN4, family="25", model="97")) == (
      "AMD EPYC (family 25 model 97); native bfloat16: yes (avx512_bf16)")
  assert cpu_info.describe(_cpuinfo(SAPPHIRE_RAPIDS, name="Intel Xeon", family="6",
                                    model="143")).endswith(
      "native bfloat16: yes (avx512_bf16/amx_bf16)")


def test_missing_cpuinfo_is_no_native_bfloat16(tmp_path, monkeypatch):
  assert cpu_info.read_cpuinfo(str(tmp_path / "absent")) == ""
  monkeypatch.setattr(cpu_info, "CPUINFO_PATH", str(tmp_path / "absent"))
  monkeypatch.setattr(cpu_info.platform, "processor", lambda: "")
  assert cpu_info.native_bfloat16() is False
  assert cpu_info.describe() == "unknown CPU; native bfloat16: no (no avx512_bf16/amx_bf16)"


def test_the_real_cpuinfo_is_read_when_no_text_is_given(tmp_path, monkeypatch):
  path = tmp_path / "cpuinfo"
  path.write_text(_cpuinfo(ZEN4))
  monkeypatch.setattr(cpu_info, "CPUINFO_PATH", str(path))
  assert cpu_info.native_bfloat16() is True
  assert cpu_info.cpu_model() == "AMD EPYC (family 25 model 17)"
