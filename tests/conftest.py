import pytest
from metainfer.testing import write_random_checkpoint, hf_model


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory):
    """Tiny random-weight checkpoints written by transformers' save_pretrained, built once per
    session."""
    root = tmp_path_factory.mktemp("ckpt")
    cache = {}

    def get(preset: str, **overrides):
        key = (preset, tuple(sorted(overrides.items())))
        if key not in cache:
            cache[key] = write_random_checkpoint(
                root / f"{preset}-{len(cache)}", preset, **overrides
            )
        return cache[key]

    return get


@pytest.fixture(scope="session")
def hf_models():
    cache = {}

    def get(path):
        if path not in cache:
            cache[path] = hf_model(path)
        return cache[path]

    return get
