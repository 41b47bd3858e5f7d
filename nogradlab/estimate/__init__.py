"""estimate: GPU memory without a GPU. A step traced on fake tensors (``fake``), the kernels CUDA would
pick (``cudamodel``), the caching allocator's model (``allocator``), the largest batch that fits
(``batch``), sweeps over batches (``sweep``) and the ``nogradlab estimate`` command (``cli``).
Imports only ``core``."""
