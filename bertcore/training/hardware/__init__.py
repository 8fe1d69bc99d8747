"""Where pretraining computes: the CPU's kernels and threads, torch.distributed (the device
and precision: `bertcore.common.devices`)."""
