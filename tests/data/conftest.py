import warnings

import pytest


@pytest.fixture(scope="session")
def mcore():
    """megatron-core's datasets package (the reference implementation; a dev dependency). Importing
    it pulls in torch pieces and warns that Transformer Engine is absent; the warning is not ours."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets import gpt_dataset, indexed_dataset
        from megatron.core.datasets.utils import Split
    return indexed_dataset, gpt_dataset, Split
