"""Where pretraining computes: the device, the CPU's kernels and threads, torch.distributed."""
