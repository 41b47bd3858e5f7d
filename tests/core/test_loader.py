"""core.loader: the lazy load of a registry, shared by the claims' ledger and the exercises' registry."""
import pytest

from nogradlab.core.loader import Loader


def test_a_loader_imports_once_and_names_the_face_when_none_was_given():
    load = Loader("nogradlab.somewhere")
    with pytest.raises(RuntimeError, match="nogradlab.somewhere"):
        load()
    calls = []
    load.use(lambda: calls.append(1))
    assert load() is True and load() is False and calls == [1] and load.loaded


@pytest.mark.parametrize("retry, loaded", [(True, False), (False, True)])
def test_a_failed_import_is_tried_again_only_with_retry(retry, loaded):
    load = Loader("face")

    def boom():
        raise ImportError("a check module is broken")

    load.use(boom)
    with pytest.raises(ImportError):
        load(retry=retry)
    assert load.loaded is loaded
