from trainperf.model.flops import flops_per_token, matmul_params
from trainperf.model.transformer import Transformer

__all__ = ["Transformer", "flops_per_token", "matmul_params"]
