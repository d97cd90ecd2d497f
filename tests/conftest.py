import torch

torch.set_default_dtype(torch.float64)
