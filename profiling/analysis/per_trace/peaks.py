"""The peak dense TFLOP/s of each accelerator the report knows, by element type: what MFU is a
share of. Dense means without structured sparsity (vendors print both; the sparse figure is
twice the dense one). ``fp32`` is the plain (non-tensor-core) rate: PyTorch runs fp32 matmuls
in full fp32 unless ``torch.backends.cuda.matmul.allow_tf32`` says otherwise. A device or type
the table lacks has no MFU: ``--peak-tflops`` gives the peak.

Found by the device's name as the trace's ``deviceProperties`` (or ``torch.cuda.get_device_name``)
gives it: "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "Tesla V100-SXM2-16GB", "AMD Instinct
MI300X". SXM parts: a PCIe card of the same name runs lower clocks (its MFU reads high).
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Peak:
    device: str  # as the name holds it
    tflops: dict[str, float]  # element type -> dense TFLOP/s
    source: str


PEAKS = (
    Peak(
        "V100",
        {"fp16": 125.0, "fp32": 15.7, "fp64": 7.8},
        "NVIDIA Tesla V100 datasheet (SXM2): 125 TFLOPS tensor, 15.7 single, 7.8 double",
    ),
    Peak(
        "A100",
        {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5, "fp64": 9.7},
        "NVIDIA A100 Tensor Core GPU datasheet (SXM, dense): BF16/FP16 312, TF32 156, FP32 19.5, FP64 9.7",
    ),
    Peak(
        "H100",
        {"fp8": 1978.9, "bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9, "fp64": 33.5},
        "NVIDIA H100 Tensor Core GPU datasheet (SXM; sparse figures halved): FP8 1979, BF16/FP16 989, "
        "TF32 495, FP32 67, FP64 34",
    ),
    Peak(
        "H200",
        {"fp8": 1978.9, "bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9, "fp64": 33.5},
        "NVIDIA H200 Tensor Core GPU datasheet (SXM; sparse figures halved): the H100's compute, "
        "FP8 1979, BF16/FP16 989, TF32 495, FP32 67, FP64 34",
    ),
    Peak(
        "B200",
        {"fp8": 4500.0, "bf16": 2250.0, "fp16": 2250.0, "tf32": 1100.0, "fp64": 40.0},
        "NVIDIA DGX B200 / HGX B200 datasheets, per GPU (sparse figures halved): FP8 4.5 PF, "
        "BF16/FP16 2.25 PF, TF32 1.1 PF, FP64 40 TF",
    ),
    Peak(
        "MI250X",
        {"bf16": 383.0, "fp16": 383.0, "fp32": 95.7, "fp64": 95.7},
        "AMD Instinct MI250X datasheet: FP16/BF16 383, FP32 and FP64 matrix 95.7",
    ),
    Peak(
        "MI300X",
        {"fp8": 2614.9, "bf16": 1307.4, "fp16": 1307.4, "tf32": 653.7, "fp32": 163.4, "fp64": 163.4},
        "AMD Instinct MI300X datasheet (dense): FP8 2615, BF16/FP16 1307, TF32 654, FP32 and FP64 matrix 163",
    ),
)


# the fastest device the table knows, at its fastest element type: what no rank's rate can pass
# twice over, whatever its device (a CPU job's too)
FASTEST_TFLOPS = max(rate for peak in PEAKS for rate in peak.tflops.values())


def peak_of(device_name: str | None) -> Peak | None:
    """The table's row for the device ``device_name`` names; None where it names none of them."""
    if not device_name:
        return None
    name = device_name.upper().replace(" ", "")
    return next((peak for peak in PEAKS if peak.device in name), None)
