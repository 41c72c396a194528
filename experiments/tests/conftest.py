import torch

# Small models: one thread is as fast and does not thrash when CI shares its two cores.
torch.set_num_threads(1)
