from trainperf.model.flops import flops_per_token, matmul_params


def __getattr__(name: str):
    # Transformer pulls in torch; loaded on first use so FLOPs counting (trainperf plan) stays light.
    if name == "Transformer":
        from trainperf.model.transformer import Transformer

        return Transformer
    raise AttributeError(f"module 'trainperf.model' has no attribute {name!r}")


__all__ = ["Transformer", "flops_per_token", "matmul_params"]
